"""A node's own mount namespace on the real runtime, shared by its kubelet and its containerd.

The kubelet mounts memory-backed volumes (projected service-account tokens, secrets,
``emptyDir`` with ``medium: Memory``) as tmpfs under its root dir, and containerd bind-mounts
those directories into the containers. Both must therefore see the same mounts: on a real node
they share the host's mount namespace. Here the kubelet cannot use the machine's (it needs
``/var/lib/kubelet/device-plugins`` bind-mounted to its own directory, see kubeacc.testbed.kubelet),
so each real-runtime node gets a persistent mount namespace of its own (``unshare
--mount=<file>``, kept alive by the bind mount of its nsfs file) that the kubelet and containerd
both enter with ``nsenter --mount=<file>``. Restarts of either join the same namespace, so a
restarted containerd still sees the volumes of running pods.

The namespace is made a slave of the machine's (``unshare --propagation slave``): nothing the
node mounts shows up outside. The machine's mounts are private, so nothing mounted outside later
shows up inside either, except under a mount the machine made shared (``mount --make-shared``)
before the namespace was made: what is mounted there later propagates in, as on a node whose
daemons all share the host's mounts (a fault run's agent state on a FUSE file system that
containerd must read, tests/faults/runtime.py). Deleting the namespace (unmounting
its file once every process in it is gone) drops every mount made in it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class MountNamespaceError(RuntimeError):
    """The namespace could not be made (no unshare(1), no CAP_SYS_ADMIN)."""


class MountNamespace:
    """A persistent mount namespace pinned at ``path`` with some bind mounts made inside."""

    def __init__(self, path: Path, binds: dict[Path, Path]) -> None:
        self.path = path
        #: target -> source, made when the namespace is created.
        self.binds = binds

    def exists(self) -> bool:
        return _is_mount_point(self.path)

    def ensure(self) -> None:
        """Create the namespace (once) and make its bind mounts."""
        if self.exists():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        script = "set -e\n" + "".join(
            f'mkdir -p "{target}"\nmount --bind "{source}" "{target}"\n'
            for target, source in self.binds.items()
        )
        argv = ["unshare", f"--mount={self.path}", "--propagation", "slave", "sh", "-c", script]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        if done.returncode != 0:
            raise MountNamespaceError(
                f"cannot make the node's mount namespace ({' '.join(argv[:4])}): "
                f"{done.stderr.strip()}"
            )

    def enter(self) -> list[str]:
        """The argv prefix that runs a command inside the namespace."""
        return ["nsenter", f"--mount={self.path}", "--"]

    def mounts_under(self, prefix: Path) -> list[str]:
        """Mount points inside the namespace under ``prefix``, in mount order."""
        if not self.exists():
            return []
        done = subprocess.run(
            [*self.enter(), "cat", "/proc/self/mountinfo"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        head = str(prefix.resolve()) + "/"
        points = (line.split()[4].replace("\\040", " ") for line in done.stdout.splitlines())
        return [p for p in points if p.startswith(head)]

    def unmount(self, points: list[str]) -> None:
        """Unmount these mount points inside the namespace (last mounted first)."""
        if points and self.exists():
            subprocess.run(
                [*self.enter(), "umount", "-l", *reversed(points)],
                capture_output=True,
                check=False,
                timeout=60,
            )

    def delete(self) -> None:
        """Unpin the namespace; it goes away with its last process, and its mounts with it."""
        if self.exists():
            subprocess.run(["umount", str(self.path)], capture_output=True, check=False)
        self.path.unlink(missing_ok=True)


def _is_mount_point(path: Path) -> bool:
    target = str(path.resolve()) if path.exists() else str(path)
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    return any(line.split()[4] == target for line in text.splitlines())


@contextmanager
def shared(directory: Path) -> Iterator[Path]:
    """``directory`` bind-mounted on itself and made shared while in the block: what is
    mounted under it later shows up in every node namespace made meanwhile (see the module
    doc). Unmounted (lazily, with whatever is still mounted under it) on the way out."""
    directory.mkdir(parents=True, exist_ok=True)
    for argv in (
        ["mount", "--bind", str(directory), str(directory)],
        ["mount", "--make-shared", str(directory)],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        if done.returncode != 0:
            if argv[1] == "--make-shared":
                subprocess.run(["umount", str(directory)], capture_output=True, check=False)
            raise MountNamespaceError(
                f"cannot share {directory} ({' '.join(argv)}): {done.stderr.strip()}"
            )
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)
