"""Keeping the long-running agent's resident memory small (glibc malloc only; no-ops elsewhere).

* at most two malloc arenas: every thread (gRPC workers, the watch, the loop) would otherwise
  get its own arena, and their free space stays resident;
* ``malloc_trim`` after each discovery pass hands the pass's freed memory back to the kernel.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

_M_ARENA_MAX = -8


@functools.cache
def _c() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def limit_arenas(count: int = 2) -> None:
    """Call before any thread starts."""
    libc = _c()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, count)


def trim() -> None:
    """Collect garbage and return free heap pages to the kernel."""
    gc.collect()
    libc = _c()
    if libc is not None:
        libc.malloc_trim(0)
