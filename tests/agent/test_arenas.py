"""The agent's malloc arena limit reaches glibc."""

from __future__ import annotations

import subprocess
import sys


def test_limit_arenas_is_accepted_by_glibc() -> None:
    # In a child: the setting lasts for the life of the process.
    code = "from kubeacc.agent.arenas import limit_arenas; print(limit_arenas(2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


TRIM_CHILD = """
import gc
from kubeacc.agent.arenas import release_free_memory

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
from kubeacc.agent.arenas import limit_arenas

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
