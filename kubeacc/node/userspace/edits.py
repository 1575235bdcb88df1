"""The CDI container edits that hand the NVIDIA driver's user space to a container.

Every file is bind-mounted read-only at its own path (``hostPath``: the file under the driver
root as the container runtime sees it). A ``createContainer`` hook (kube-acc's
``kubeacc-cdi-hook``, :mod:`kubeacc.node.userspace.hook`) then makes the dynamic loader find
the libraries: it adds the library directory to the container's ``/etc/ld.so.conf.d``, makes
the links (``libcuda.so.1``, ``libcuda.so``, ...) and runs kube-acc's own ``ldconfig`` (never the
image's) confined to the container's root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubeacc.node.userspace.nvidia import NvidiaUserSpace

HOOK_NAME = "createContainer"
READ_ONLY = ["ro", "nosuid", "nodev", "bind"]
#: A socket is connected to, which a read-only mount allows; without ``ro`` the container's
#: root could change the host's socket file itself (``chmod``, ``chown``, times, attributes).
SOCKET = ["ro", "nosuid", "nodev", "noexec", "bind"]


def hook_args(us: NvidiaUserSpace, ldconfig: Path | None = None) -> list[str]:
    """The hook's command line (argv[0] included); ``ldconfig``: the host path of the
    ldconfig it runs (None: the host's own)."""
    args = ["kubeacc-cdi-hook", "update-ldcache"]
    if ldconfig is not None:
        args += ["--ldconfig", str(ldconfig)]
    args += ["--folder", us.library_dir]
    for link, target in us.links:
        args += ["--link", f"{target}::{link}"]
    return args


def container_edits(
    us: NvidiaUserSpace, driver_root: Path, hook: Path, ldconfig: Path | None = None
) -> dict[str, Any]:
    """``containerEdits`` of the user space ``us``; ``driver_root``: the driver root as the
    runtime sees it, ``hook``: the hook program's host path, ``ldconfig``: the ldconfig's."""

    def mount(path: str, options: list[str]) -> dict[str, Any]:
        host = driver_root / path.lstrip("/")
        return {"hostPath": str(host), "containerPath": path, "options": options}

    mounts = [mount(p, READ_ONLY) for p in us.files]
    mounts += [mount(p, SOCKET) for p in us.sockets]
    return {
        "env": [f"KUBEACC_NVIDIA_DRIVER_VERSION={us.version}"],
        "mounts": mounts,
        "hooks": [{"hookName": HOOK_NAME, "path": str(hook), "args": hook_args(us, ldconfig)}],
    }
