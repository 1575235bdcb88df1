"""Counting the API requests a component sends, client-side: httpx2 logs one "HTTP Request"
line per request at INFO, on the thread that sent it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

H = TypeVar("H", bound=logging.Handler)


@contextmanager
def httpx_lines(handler: H) -> Iterator[H]:
    """``handler`` receives httpx2's request lines for the duration of the block."""
    httpx_log = logging.getLogger("httpx2")
    level = httpx_log.level
    httpx_log.setLevel(logging.INFO)
    httpx_log.addHandler(handler)
    try:
        yield handler
    finally:
        httpx_log.removeHandler(handler)
        httpx_log.setLevel(level)
