"""The crash-test pause point (kubeacc/agent/dra/hooks.py): the marker a test waits for is
there whole or not at all (tests/agent/dra/agentproc.py reads it the moment it exists)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kubeacc.agent.dra import hooks


def test_the_marker_is_written_whole_and_the_point_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hooks, "_ACTIVE", frozenset({"unprepare-after-checkpoint"}))
    monkeypatch.delenv("KUBEACC_AGENT_PAUSE_FILE", raising=False)
    seen: list[str] = []
    paused = threading.Thread(
        target=hooks.pause_point, args=("unprepare-after-checkpoint", tmp_path), daemon=True
    )
    paused.start()
    marker = tmp_path / "paused"
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        if marker.exists():
            seen.append(marker.read_text())
    assert seen == ["unprepare-after-checkpoint"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paused"]  # no temporary file left
    paused.join(0.2)
    assert paused.is_alive()  # blocked until the process is killed


def test_an_inactive_point_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "_ACTIVE", frozenset({"prepare-after-cdi"}))
    hooks.pause_point("unprepare-after-checkpoint", tmp_path)
    assert list(tmp_path.iterdir()) == []
