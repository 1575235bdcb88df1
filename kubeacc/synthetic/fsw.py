"""Low-level file-system writer for synthetic host trees.

Every path handed to :class:`TreeWriter` is *host-absolute* (``/sys/...``, ``/dev/...``) and is
placed under the writer's root. Symlinks are always written relative, exactly as the kernel's
sysfs shows them, so a tree stays valid when it is moved or bind-mounted somewhere else.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath


class TreeWriter:
    """Writes files, directories and relative symlinks below one host root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def host(self, path: str | PurePosixPath) -> Path:
        """The on-disk location of a host-absolute path."""
        rel = str(path).lstrip("/")
        return self.root / rel if rel else self.root

    def mkdir(self, path: str | PurePosixPath) -> Path:
        target = self.host(path)
        target.mkdir(parents=True, exist_ok=True)
        return target

    def write(self, path: str | PurePosixPath, content: str | bytes = "") -> Path:
        """Write a regular file (parents are created). Text is written as-is, no newline added."""
        target = self.host(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
        return target

    def attr(self, path: str | PurePosixPath, value: object) -> Path:
        """Write a sysfs attribute the way the kernel shows it: the value and one newline."""
        return self.write(path, f"{value}\n")

    def symlink(self, link: str | PurePosixPath, target: str | PurePosixPath) -> Path:
        """Create ``link`` pointing at host-absolute ``target`` through a relative path.

        An existing link at that place is replaced (the kernel re-points links such as
        ``driver`` on rebind, and profiles may re-bind a function).
        """
        link_p = PurePosixPath(link)
        rel = os.path.relpath(str(target), str(link_p.parent))
        on_disk = self.host(link_p)
        on_disk.parent.mkdir(parents=True, exist_ok=True)
        if on_disk.is_symlink() or on_disk.exists():
            on_disk.unlink()
        on_disk.symlink_to(rel)
        return on_disk

    def dev_node(self, path: str | PurePosixPath) -> Path:
        """A ``/dev`` entry. Device nodes cannot be made unprivileged: an empty regular file."""
        target = self.host(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(exist_ok=True)
        return target
