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
    def hold(self, uids: set[str], *, wait: bool = True) -> Iterator[bool]:
        """Hold ``uids`` for the ``with`` block (True); with ``wait=False``, False at once
        instead of waiting when another call holds one of them."""
        with self._changed:
            free = not (uids & self._busy)
            if wait and not free:
                self._changed.wait_for(lambda: not (uids & self._busy))
                free = True
            if free:
                self._busy |= uids
        if not free:
            yield False
            return
        try:
            yield True
        finally:
            with self._changed:
                self._busy -= uids
                self._changed.notify_all()
