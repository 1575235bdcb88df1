"""Crash-test hook: make the agent stop dead at a named point of prepare/unprepare.

``KUBEACC_AGENT_PAUSE_AT=<point>`` (comma-separated for several) makes the plugin, on reaching
that point, create the file ``KUBEACC_AGENT_PAUSE_FILE`` (default ``<state-dir>/paused``)
containing the point's name (written whole, then renamed into place) and then block forever,
so a test can SIGKILL the agent at exactly that moment. Points:

* ``prepare-after-mig``        a MIG partition's GPU and compute instance made, no CDI spec yet
* ``prepare-after-cdi``        CDI spec written, checkpoint not yet
* ``prepare-after-checkpoint`` spec and checkpoint written, kubelet not yet answered
* ``unprepare-after-sharing``  MIG instances and GPU sharing settings undone, claim still in
  the checkpoint
* ``unprepare-after-checkpoint`` claim gone from the checkpoint, CDI spec still on disk
* ``unprepare-after-cdi``      both removed, kubelet not yet answered

and the Cyborg kind's (:mod:`kubeacc.agent.dra.cyborg.kind`): ``prepare-after-arq`` (ARQs made
and recorded), ``prepare-after-allocation`` (Placement allocation made), ``prepare-after-bind``
(bind asked, not yet Bound), ``unprepare-after-unbind``, ``unprepare-after-arq-delete``.

Unset (the default) the hook costs one set lookup.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kubeacc.node.atomic import write_atomic

POINTS = (
    "prepare-after-mig",
    "prepare-after-cdi",
    "prepare-after-checkpoint",
    "unprepare-after-sharing",
    "unprepare-after-checkpoint",
    "unprepare-after-cdi",
    "prepare-after-arq",
    "prepare-after-allocation",
    "prepare-after-bind",
    "unprepare-after-unbind",
    "unprepare-after-arq-delete",
)
_ACTIVE = frozenset(p for p in os.environ.get("KUBEACC_AGENT_PAUSE_AT", "").split(",") if p)


def pause_point(point: str, state_dir: Path) -> None:
    if point not in _ACTIVE:
        return
    marker = Path(os.environ.get("KUBEACC_AGENT_PAUSE_FILE", str(state_dir / "paused")))
    # whole or not there: a test that sees the file reads the point's name, never a part of it
    write_atomic(marker, point.encode(), durable=False)
    threading.Event().wait()  # until killed
