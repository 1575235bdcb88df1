"""Supervised loops: an unexpected exception restarts the loop (counted), stop ends it."""

from __future__ import annotations

import threading

import pytest

from kubeacc.node import supervise
from kubeacc.node.supervise import supervised


def test_a_crashing_loop_is_restarted_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervise, "MAX_PAUSE", 0.01)
    stop = threading.Event()
    runs: list[int] = []
    restarts: list[str] = []

    def loop() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise OSError(24, "Too many open files")
        stop.wait()

    thread = supervised("t", loop, stop, on_restart=lambda e: restarts.append(str(e)))
    deadline = threading.Event()
    for _ in range(100):
        if len(runs) >= 3:
            break
        deadline.wait(0.05)
    assert len(runs) == 3 and len(restarts) == 2 and "Too many open files" in restarts[0]
    assert thread.is_alive()
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
