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
