"""An ``os`` module with faults, for the kubeacc.node.atomic and .checkpoint modules.

``os.write`` writes at most ``chunk`` bytes per call (short writes) and fails with ENOSPC once
``space`` bytes are used up; ``os.fsync`` fails with EIO when ``fsync_fails`` and counts the
flushes in ``fsyncs``. Everything else is the real ``os`` on real files.
"""

from __future__ import annotations

import errno
import os
from types import ModuleType
from typing import Any

import pytest

from kubeacc.agent.dra import checkpoint
from kubeacc.node import atomic


class FaultyOS:
    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self.chunk = 1 << 30
        self.space: int | None = None  # bytes left; None: unlimited
        self.fsync_fails = False
        self.fsyncs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def write(self, fd: int, data: Any) -> int:
        n = min(len(data), self.chunk)
        if self.space is not None:
            if self.space == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            n = min(n, self.space)
            self.space -= n
        return int(self._real.write(fd, bytes(data[:n])))

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        if self.fsync_fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self._real.fsync(fd)


@pytest.fixture
def fos(monkeypatch: pytest.MonkeyPatch) -> FaultyOS:
    fake = FaultyOS(os)
    monkeypatch.setattr(atomic, "os", fake)
    monkeypatch.setattr(checkpoint, "os", fake)
    return fake


def install(monkeypatch: pytest.MonkeyPatch) -> FaultyOS:
    fake = FaultyOS(os)
    monkeypatch.setattr(atomic, "os", fake)
    monkeypatch.setattr(checkpoint, "os", fake)
    return fake
