"""Small helpers for the testbed tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout: float = 60, what: str = "condition") -> T:
    """Call ``probe`` until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        last = value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
