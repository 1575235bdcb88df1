"""Per-claim serialization for calls that do their slow part outside the driver lock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class ClaimGuard:
    """A call holds its claim UIDs while it works; another call for one of them waits.

    A call takes all its UIDs at once, so two calls never wait for each other (no deadlock),
    and calls for other claims never wait at all.
    """

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, uids: set[str]) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not (uids & self._busy))
            self._busy |= uids
        try:
            yield
        finally:
            with self._changed:
                self._busy -= uids
                self._changed.notify_all()
