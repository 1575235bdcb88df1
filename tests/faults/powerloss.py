"""The ``power-loss`` fault on real lazy mounts: each node's agent state directory and CDI
directory live on the lazy file system (kubeacc/testbed/lazyfs.py) for the whole run.

A power loss SIGKILLs the agent at a random moment while it runs and, at that instant, drops
every write neither directory had made durable (:meth:`LazyState.power_cut`); the reboot that
follows (tests/faults/faults.py) resets the hardware, and the CDI directory, a ``/var/run`` one,
comes back empty. A plain node reboot is a clean shutdown: the mounts are unmounted with every
write kept. Either way :func:`power_on` mounts them again before the agent starts.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

from tests.agent.dra.lazystate import LazyState

if TYPE_CHECKING:
    from tests.faults.faults import Node

_mounts: dict[str, LazyState] = {}
#: the moment of a cut: this long after the fault was picked, the agent running meanwhile
CUT_WITHIN_S = 1.5


def lazy(node: Node) -> LazyState:
    if node.name not in _mounts:
        _mounts[node.name] = LazyState(node.agent, lazy_cdi=not node.real_runtime)
    return _mounts[node.name]


def mount(node: Node) -> None:
    """The node's state and CDI directories on lazy mounts (at the start of a run)."""
    lazy(node).mount()


def power_off(node: Node, *, cut: bool) -> None:
    """The agent SIGKILLed; ``cut``: at a random moment, its un-durable writes dropped with it;
    otherwise a clean shutdown (every write kept)."""
    state = lazy(node)
    if cut:
        time.sleep(random.Random(f"{node.name}/{state.cuts}").uniform(0.0, CUT_WITHIN_S))
        state.power_cut(cdi_kept=False)
        return
    node.agent.kill()
    state.unmount()
    state.empty_cdi()  # a tmpfs: empty after any boot


def power_on(node: Node) -> None:
    """Mount again (the boot) before the agent starts."""
    lazy(node).mount()


def unmount(node: Node) -> None:
    """At the end of a run."""
    if node.name in _mounts:
        _mounts.pop(node.name).unmount()
