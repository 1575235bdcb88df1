"""Durable file replacement: temp file, fsync, rename, fsync of the directory."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    ``durable``: also flush file and directory, so the new file survives a power loss.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def remove_durable(path: Path, *, durable: bool = True) -> bool:
    """Delete ``path`` (if present), flushing the directory if ``durable``; True if it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_dir(path.parent)
    return True


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on directories
            os.fsync(fd)
    finally:
        os.close(fd)
