"""A power-loss model of the state writers' file system calls (:mod:`kubeacc.node.atomic`).

What a power loss keeps of a file replaced by rename: the new name once the directory entry
reached the disk (a directory fsync, or any journal commit of the file system: ext4 commits
metadata every few seconds on its own), and the new file's bytes only if the file was flushed
before. A rename over a file whose bytes were never flushed can therefore leave an empty file
after the loss at any moment (ext4 without ``auto_da_alloc``, XFS). :class:`PowerLossOS`
records each such rename: the final paths a power loss could leave empty.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass
class PowerLossOS:
    real: ModuleType
    #: path of an open fd -> its path; fds flushed since opened
    _fds: dict[int, str] = field(default_factory=dict)
    _flushed: set[str] = field(default_factory=set)
    #: final paths a power loss could leave empty (an unflushed file made durable by a rename)
    torn: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def open(self, path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = int(self.real.open(path, flags, mode, **kw))
        self._fds[fd] = os.fspath(path)
        self._flushed.discard(os.fspath(path))
        return fd

    def fsync(self, fd: int) -> None:
        self.real.fsync(fd)
        if (path := self._fds.get(fd)) is not None:
            self._flushed.add(path)

    def close(self, fd: int) -> None:
        self._fds.pop(fd, None)
        self.real.close(fd)

    def replace(self, src: Any, dst: Any) -> None:
        self.real.replace(src, dst)
        if os.fspath(src) not in self._flushed:
            self.torn.append(os.fspath(dst))

    def torn_names(self) -> set[str]:
        return {Path(p).name for p in self.torn}
