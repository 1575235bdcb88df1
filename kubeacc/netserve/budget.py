"""A shared allowance of request-body bytes, so that many large bodies at once cannot add up.

Each connection may send up to ``max_body`` bytes; the bodies being read or decoded at one
moment share ``total``. A request takes its share before its body is read and gives it back
when the answer is written; one that cannot get it within ``wait`` seconds is answered 503.
A decoded JSON document takes several times its size in memory, so this bounds the
process's memory under any mix of requests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class BudgetExhausted(Exception):
    pass


class ByteBudget:
    def __init__(self, total: int) -> None:
        self.total = total
        self._free = total
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, size: int, wait: float) -> Iterator[None]:
        size = min(size, self.total)
        with self._cond:
            if not self._cond.wait_for(lambda: self._free >= size, timeout=wait):
                raise BudgetExhausted(f"{size} bytes of body budget not free within {wait:g} s")
            self._free -= size
        try:
            yield
        finally:
            with self._cond:
                self._free += size
                self._cond.notify_all()

    @property
    def free(self) -> int:
        with self._cond:
            return self._free
