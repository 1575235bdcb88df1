"""kube-acc's CDI hook program (``kubeacc/native/cdihook.c``) and the ``ldconfig`` it runs,
on the host.

The image carries the hook at ``/opt/kubeacc/native/kubeacc-cdi-hook`` and Debian's static
``/sbin/ldconfig``; the agent copies both to ``<state-dir>/native`` at start, the host paths the
CDI specs' ``createContainer`` hooks name (the runtime runs the hook, so it must be a file of
the host). The hook runs that ``ldconfig``, never the container image's (docs/security.md,
"Node-side threat model"); without the copy it runs the host's own.
"""

from __future__ import annotations

from pathlib import Path

from kubeacc.node.hostcopy import install

HOOK_NAME = "kubeacc-cdi-hook"
IMAGE_HOOK = Path("/opt/kubeacc/native") / HOOK_NAME
#: The agent's own ldconfig (its image's; on a test machine, the machine's): static.
IMAGE_LDCONFIG = Path("/sbin/ldconfig")


def install_hook(source: Path | None, state_dir: Path) -> Path | None:
    """The hook's host path, or None (logged) when there is none to copy."""
    return install(source, IMAGE_HOOK, state_dir, "the NVIDIA driver user space is not injected")


def install_ldconfig(state_dir: Path) -> Path | None:
    """The host path of the ldconfig the hook runs, or None (logged): the hook then runs the
    host's ``/sbin/ldconfig`` (refused unless static and owned by root)."""
    return install(None, IMAGE_LDCONFIG, state_dir, "the CDI hook runs the host's ldconfig")
