"""Time since a start the API server recorded (an operation's ``startTime``), measured so that a
step of this process's clock (NTP, a VM resumed) changes nothing once the start was seen.

The start is a wall-clock time, possibly written by another process; the first look compares it
with this process's wall clock, and from then on the age grows with the monotonic clock. A step
before that first look cannot be told from a real age; every later one is ignored, so a clock
stepped an hour forward does not time out every running operation at once.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Hashable

#: Starts remembered at most (operations deleted while running are forgotten when it is full).
MAX_SEEN = 10_000


class Elapsed:
    def __init__(
        self,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._mono = mono
        self._seen: dict[Hashable, tuple[float, float]] = {}

    def age(self, key: Hashable, start: dt.datetime) -> float:
        """Seconds since ``start`` (of the thing named ``key``)."""
        now = self._mono()
        seen = self._seen.get(key)
        if seen is None:
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            age = (self._wall() - start).total_seconds()
            self._seen[key] = (now, age)
            return age
        at, age_then = seen
        return age_then + (now - at)

    def forget(self, key: Hashable) -> None:
        self._seen.pop(key, None)
