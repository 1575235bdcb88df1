"""An operation's age across clock steps of the controller (issue 46, clock jumps)."""

from __future__ import annotations

import datetime as dt

from kubeacc.controller.elapsed import MAX_SEEN, Elapsed

START = dt.datetime(2026, 12, 5, 12, 0, 0, tzinfo=dt.UTC)


class Clocks:
    def __init__(self) -> None:
        self.wall = START + dt.timedelta(seconds=10)
        self.mono = 1000.0

    def tick(self, seconds: float) -> None:
        self.wall += dt.timedelta(seconds=seconds)
        self.mono += seconds


def test_a_clock_step_after_the_start_was_seen_changes_no_age() -> None:
    c = Clocks()
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    assert e.age("op", START) == 10  # the first look: the wall clocks
    c.tick(5)
    assert e.age("op", START) == 15
    c.wall += dt.timedelta(hours=1)  # NTP steps the clock an hour forward
    assert e.age("op", START) == 15  # not an hour: a 300 s operation is not timed out
    c.wall -= dt.timedelta(hours=2)  # ... and back, further
    c.tick(1)
    assert e.age("op", START) == 16
    assert e.age("other", START) == (c.wall - START).total_seconds()  # a new one: wall clock


def test_the_remembered_starts_are_bounded() -> None:
    c = Clocks()
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    for i in range(MAX_SEEN + 5):
        e.age(i, START)
    assert len(e._seen) <= MAX_SEEN
    e.forget(MAX_SEEN + 4)
    assert MAX_SEEN + 4 not in e._seen
