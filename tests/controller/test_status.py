"""An operation's duration for the metric, across clock steps of the controller (issue 46, clock
steps: the fault runner's ``clock-step``)."""

from __future__ import annotations

import datetime as dt

from kubeacc.controller.elapsed import Elapsed
from kubeacc.controller.status import operation_seconds

START = dt.datetime(2026, 12, 5, 12, 0, 0, tzinfo=dt.UTC)
STAMP = "2026-12-05T12:00:00Z"
OP = {"metadata": {"uid": "uid-1", "name": "reset-1"}}


class Clocks:
    def __init__(self) -> None:
        self.wall = START + dt.timedelta(seconds=2)
        self.mono = 500.0


def test_a_step_of_the_wall_clock_during_the_operation_is_not_its_duration() -> None:
    c = Clocks()
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    # the dispatcher looks at the running operation (its timeout): 2 s old
    assert e.age((OP["metadata"]["uid"], STAMP), START) == 2
    c.mono += 8
    c.wall += dt.timedelta(hours=2, seconds=8)  # NTP steps the clock two hours ahead
    assert operation_seconds(OP, STAMP, e) == 10  # not 2 h 10 s
    assert e._seen == {}  # the finished operation is forgotten


def test_a_start_stamped_ahead_of_this_clock_is_no_negative_duration() -> None:
    c = Clocks()
    c.wall = START - dt.timedelta(hours=1)  # the replica that started it was an hour ahead
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    assert operation_seconds(OP, STAMP, e) == 0.0
