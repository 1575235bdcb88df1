"""The fault runner's stepped clocks (tests/faults/clock.py): a Python process under libfaketime
sees its wall clock jump when the offset file changes, and its monotonic clock not."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults import clock

#: Reads a line, answers its wall clock (time.time, datetime.now) and monotonic clock, after a
#: time.sleep (an absolute monotonic sleep in Python 3.11) and a threading.Event wait.
CHILD = """
import datetime, json, sys, threading, time
for _ in sys.stdin:
    time.sleep(0.01)
    threading.Event().wait(0.01)
    now = datetime.datetime.now(datetime.timezone.utc).timestamp()
    print(json.dumps([time.time(), now, time.monotonic()]), flush=True)
"""


def _ask(proc: subprocess.Popen[str]) -> tuple[float, float, float, float, float]:
    """(child's time.time, its datetime.now, its monotonic, ours, our monotonic)."""
    assert proc.stdin is not None and proc.stdout is not None
    ours, mono = time.time(), time.monotonic()
    proc.stdin.write("\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    assert line, f"the child exited {proc.wait()}: {proc.stderr.read() if proc.stderr else ''}"
    wall, now, its_mono = json.loads(line)
    return wall, now, its_mono, ours, mono


def test_a_process_under_the_clock_sees_its_wall_clock_step_and_not_its_monotonic_clock(
    tmp_path: Path,
) -> None:
    clocks = clock.Clocks(tmp_path, ["node-a"])
    c = clocks["node-a"]
    proc = subprocess.Popen(
        [*c.wrapper(), sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for offset in (0, 7200, -3600, 0):
            c.step(offset)
            assert c.offset() == offset
            wall, now, its_mono, ours, mono = _ask(proc)
            # the wall clock is off by the offset (a minute's slack for a slow machine)
            assert abs(wall - ours - offset) < 60, (offset, wall - ours)
            assert abs(now - ours - offset) < 60, (offset, now - ours)
            # CLOCK_MONOTONIC is the machine's: the same in the child as here
            assert abs(its_mono - mono) < 60, (offset, its_mono - mono)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def test_the_other_clocks_are_left_alone(tmp_path: Path) -> None:
    clocks = clock.Clocks(tmp_path, ["node-a", "node-b", "replica-a"])
    clocks["node-a"].step(7200)
    assert clocks["node-b"].offset() == 0
    assert clocks["replica-a"].offset() == 0
    assert clocks.targets() == ["node-a", "node-b", "replica-a"]


def test_a_step_is_seeded() -> None:
    targets = ["node-a", "replica-a"]
    first = [clock.plan(random.Random("7"), targets) for _ in range(1)]
    assert first == [clock.plan(random.Random("7"), targets)]
    steps = [clock.plan(random.Random(str(i)), targets) for i in range(40)]
    assert {s.offset for s in steps} == set(clock.OFFSETS)
    assert {s.target for s in steps} == set(targets)
    assert all(clock.HOLD[0] <= s.hold <= clock.HOLD[1] for s in steps)


def test_a_missing_libfaketime_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clock, "LIBFAKETIME_GLOB", "/nonexistent/*/libfaketime.so.1")
    with pytest.raises(clock.ClockError, match="install Debian's faketime"):
        clock.libfaketime()
