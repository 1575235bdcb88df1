"""Durable file writes: every byte written (short writes retried), file and directory flushed.

:func:`write_atomic` replaces a file so that a crash or a full disk leaves either the old file
or the complete new one, never a part: temp file, all bytes written, size checked, fsync,
rename, fsync of the directory. A failure removes the temp file and raises :class:`OSError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is out; a write that makes no progress is ENOSPC."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def write_atomic(
    path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True, verify: bool = False
) -> None:
    """Replace ``path`` with ``data``: the old file until the new one is complete.

    ``durable``: also flush file and directory, so the new file survives a power loss.
    ``verify``: read the temp file back and compare before it replaces the old one.
    """
    tmp = tmp_path(path)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
            if os.fstat(fd).st_size != len(data):
                raise OSError(errno.EIO, f"{tmp.name} is short after writing")
            if verify and os.pread(fd, len(data) + 1, 0) != data:
                raise OSError(errno.EIO, f"{tmp.name} reads back different")
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def tmp_path(path: Path) -> Path:
    """The temp file :func:`write_atomic` uses for ``path`` (hidden: ``.<name>.tmp``)."""
    return path.with_name(f".{path.name}.tmp")


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (renames, new and removed files)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):  # file systems that cannot
            raise
    finally:
        os.close(fd)
