"""Unix socket paths for the kubelet-facing gRPC servers."""

from __future__ import annotations

from pathlib import Path

#: sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


class SocketPathTooLong(ValueError):
    """A socket path the kernel cannot bind (a directory given by the user is too deep)."""


def check_socket_path(path: Path) -> None:
    """Refuse a path the kernel cannot bind, with a message that says why."""
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise SocketPathTooLong(
            f"socket path longer than {MAX_SOCKET_PATH} bytes: {path} (choose a shorter directory)"
        )
