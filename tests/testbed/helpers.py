"""Small helpers for the testbed tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from lightkube import ApiError

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None],
    timeout: float = 60,
    what: str = "condition",
    log: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it returns something truthy; return that value. On a time-out the
    tail of ``log()`` (a daemon's log, say) is part of the failure."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        last = value
        time.sleep(0.2)
    tail = f"\n--- log tail ---\n{log()[-3000:]}" if log is not None else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){tail}")


def eventually_refused(write: Callable[[], Any], timeout: float = 20) -> str:
    """Retry ``write`` until the API server refuses it (403/422); return the message.

    Admission policies take a moment to be loaded after they are created or changed.
    ``timeout=0`` makes one attempt.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            write()
        except ApiError as exc:
            assert exc.status.code in (403, 422), exc.status
            return str(exc.status.message)
        if time.monotonic() > deadline:
            raise AssertionError("the write was never refused")
        time.sleep(0.3)


def forbidden(what: str, write: Callable[[], Any]) -> None:
    """``write`` is refused by RBAC (403); ``what`` names it in the failure."""
    try:
        write()
    except ApiError as exc:
        assert exc.status.code == 403, (what, exc.status)
        return
    raise AssertionError(f"the tenant could {what}")
