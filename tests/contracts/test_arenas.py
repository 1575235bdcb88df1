"""The agent's malloc arena limit reaches glibc."""

from __future__ import annotations

import os
import subprocess
import sys

from kubeacc.contracts.arenas import ARENAS


def test_limit_arenas_is_accepted_by_glibc() -> None:
    # In a child: the setting lasts for the life of the process.
    code = "from kubeacc.contracts.arenas import limit_arenas; print(limit_arenas(2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


TRIM_CHILD = """
import gc
from kubeacc.contracts.arenas import release_free_memory

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

# 60 MB in 1 KiB blocks (malloc, not Python's small-object allocator); every 500th block and
# the last one stay alive, so the heap cannot simply shrink from its top.
blocks = [bytes(1024) + bytes([i % 251]) for i in range(60_000)]
keep = blocks[::500] + blocks[-1:]
del blocks
gc.collect()
before = rss_kb()
released = release_free_memory()
after = rss_kb()
print(released, before, after)
"""


def test_release_free_memory_returns_freed_heap_pages() -> None:
    out = subprocess.run(
        [sys.executable, "-c", TRIM_CHILD], capture_output=True, text=True, check=True
    )
    released, before, after = out.stdout.split()
    assert released == "True"
    assert int(before) - int(after) > 30_000, out.stdout  # KiB: most of the 60 MB came back


MMAP_CHILD = """
import ctypes, sys
from kubeacc.contracts.arenas import limit_arenas

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    limit_arenas(2)
# what an asyncio socket read does: a 256 KiB buffer, freed (or shrunk) soon after
buffer = bytes(256 * 1024)
del buffer
blocks = [bytes(200 * 1024) for _ in range(10)]
print(libc.mallinfo2().hblks)
"""


def _mmapped_blocks(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", MMAP_CHILD, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_large_buffers_stay_mmapped_after_one_was_freed() -> None:
    # glibc's default raises the threshold past the freed 256 KiB block, so the next large
    # buffers land in the heap (and their holes stay); fixed, each is its own mapping.
    assert _mmapped_blocks("default") < 10
    assert _mmapped_blocks("fixed") >= 10


HEAPS_CHILD = """
import ctypes, sys, tempfile, threading
from kubeacc.contracts.arenas import limit_arenas

print(limit_arenas())
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
kept = []
go = threading.Barrier(6)

def work():
    go.wait()  # all threads alive at once: each asks glibc for an arena of its own
    kept.append([bytes(2000) for _ in range(100)])  # malloc, not Python's small-object heap

threads = [threading.Thread(target=work) for _ in range(5)]
for t in threads:
    t.start()
go.wait()
for t in threads:
    t.join()
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    fp = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    print(open(out.name).read().count("<heap nr="))
"""


def _heaps(env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", HEAPS_CHILD],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env,
    )
    accepted, heaps = out.stdout.split()
    return accepted, int(heaps)


def test_the_arena_limit_holds_for_threads_and_the_environment_overrides_it() -> None:
    assert _heaps({}) == ("True", ARENAS)
    assert _heaps({"MALLOC_ARENA_MAX": "1"}) == ("True", 1)  # the operator's setting stays
    assert _heaps({"MALLOC_ARENA_MAX": "4"}) == ("True", 4)
