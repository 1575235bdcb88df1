"""kube-acc's CDI hook program (``kubeacc/native/cdihook.c``) on the host.

The image carries it at ``/opt/kubeacc/native/kubeacc-cdi-hook``; the agent copies it to
``<state-dir>/native`` at start, the host path the CDI specs' ``createContainer`` hooks name
(the runtime runs it, so it must be a file of the host).
"""

from __future__ import annotations

from pathlib import Path

from kubeacc.agent.hostcopy import install

HOOK_NAME = "kubeacc-cdi-hook"
IMAGE_HOOK = Path("/opt/kubeacc/native") / HOOK_NAME


def install_hook(source: Path | None, state_dir: Path) -> Path | None:
    """The hook's host path, or None (logged) when there is none to copy."""
    return install(source, IMAGE_HOOK, state_dir, "the NVIDIA driver user space is not injected")
