"""Fewer glibc malloc arenas, a fixed mmap threshold, and freed heap pages handed back.

glibc gives threads their own arenas (up to 8 per core); under steady prepare/unprepare load the
agent's worker threads each grew and fragmented one, and RSS settled ~3.5 MB higher (62.4 vs
58.8 MB after 3 minutes of bench/agent_soak.py). Two arenas serve the agent's few threads without
contention worth measuring. Must run before the threads start; no-op without glibc.

The mmap threshold is fixed at glibc's default (128 KiB). Left dynamic, glibc raises it to the
size of the largest mmapped block freed so far; asyncio reads every socket into a fresh 256 KiB
buffer and shrinks it to what arrived, so after the first read those buffers came from the heap
and the shrinks left holes behind: RSS crept up under steady load. Fixed, each such buffer is
its own mapping, gone when freed.

:func:`release_free_memory` (``malloc_trim(0)``) returns the free pages inside the arenas to the
kernel: after a burst of calls (or a large refused message) glibc keeps them mapped otherwise.
The agent's loop calls it at most every :data:`TRIM_INTERVAL` seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

#: mallopt's M_ARENA_MAX and M_MMAP_THRESHOLD (malloc.h).
M_ARENA_MAX = -8
M_MMAP_THRESHOLD = -3
ARENAS = 2
MMAP_THRESHOLD = 128 * 1024
#: Seconds between two malloc_trim calls of the agent's loop.
TRIM_INTERVAL = 30.0


def limit_arenas(count: int | None = None) -> bool:
    """``mallopt(M_ARENA_MAX, count)`` and a fixed mmap threshold; False without mallopt.

    Without ``count``: :data:`ARENAS`, unless the environment sets ``MALLOC_ARENA_MAX``: glibc
    read that at start, and an operator's setting stays in force (it used to be overridden).
    One arena instead of two measured the same agent RSS (62.3-62.8 vs 62.4-63.0 MB,
    bench/daemon_start.py), so the chart sets none.
    """
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    fixed = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if count is None:
        if os.environ.get("MALLOC_ARENA_MAX"):
            return fixed
        count = ARENAS
    return bool(mallopt(M_ARENA_MAX, count)) and fixed


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def release_free_memory() -> bool:
    """``malloc_trim(0)``; True when memory went back to the kernel (False without glibc)."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))
