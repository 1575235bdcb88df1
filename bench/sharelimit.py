"""What the share-limit library adds to a CUDA allocation: cuMemAlloc_v2 + cuMemFree_v2 pairs
against the stand-in driver, with and without the library preloaded.

Prints one JSON object. The library is built by ``kubeacc.native.build`` (as the image builds
it), the stand-in driver and the probe program as the tests build them. Target: at most
:data:`TARGET_ADDED_NS` ns added per allocation + free pair (the real driver's own cuMemAlloc
takes microseconds, so this is noise beside it). One thread, and THREADS threads racing on one
device (the same account, so the contended case is measured too).

The container's account is kept by the agent's accounting service (kubeacc.node.shareaccount,
run here in this process as the agent runs it): each reservation is a round trip to it, each
free one message, so that case is measured apart (``container_account``), with fewer pairs,
against its own target, :data:`TARGET_ACCOUNT_US` µs per pair.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kubeacc.native import build
from kubeacc.node.shareaccount import SOCKET_NAME, AccountService

TARGET_ADDED_NS = 100
TARGET_ACCOUNT_US = 100
PAIRS = 200_000
ACCOUNT_PAIRS = 5_000
ROUNDS = 7
PROBE = Path(__file__).resolve().parent.parent / "tests" / "native" / "shareprobe.c"


def per_pair(probe: Path, env: dict[str, str], pairs: int = PAIRS) -> float:
    """The median over ROUNDS runs of ns per alloc+free pair."""
    samples = []
    for _ in range(ROUNDS):
        out = subprocess.run(
            [str(probe), "ctx", "0", "bench", str(pairs)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        _, code, ns = out.stdout.splitlines()[-1].split()
        if code != "0":
            raise RuntimeError(f"bench failed: CUresult {code}: {out.stderr}")
        samples.append(float(ns))
    return statistics.median(samples)


def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kb-", dir="/tmp") as tmp:
        out = Path(tmp)
        library = build.build_library(out)
        build.build_stub(out)
        probe = build.build_program(PROBE, out / "shareprobe", out)
        base = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(out)}
        limited = {**base, "LD_PRELOAD": str(library), "KUBEACC_DEVICE_MEMORY_LIMIT": "1024"}
        accounts = AccountService(out / "accounts")
        accounts.start()
        try:
            d = accounts.open("bench", "1024")
            shared = {**limited, "KUBEACC_SHARELIMIT_SOCKET": str(d / SOCKET_NAME)}
            without = per_pair(probe, base)
            per_process = per_pair(probe, limited)
            container = per_pair(probe, shared, ACCOUNT_PAIRS)
        finally:
            accounts.stop()
    added = per_process - without
    account_us = (container - without) / 1000
    return {
        "benchmark": "sharelimit",
        "pairs_per_run": PAIRS,
        "runs": ROUNDS,
        "ns_per_alloc_free": {
            "without_library": round(without, 1),
            "library_per_process_account": round(per_process, 1),
            "library_container_account": round(container, 1),
        },
        "account_pairs_per_run": ACCOUNT_PAIRS,
        "added_ns": round(added, 1),
        "target_added_ns": TARGET_ADDED_NS,
        "container_account_added_us": round(account_us, 2),
        "target_container_account_us": TARGET_ACCOUNT_US,
        "ok": added <= TARGET_ADDED_NS and account_us <= TARGET_ACCOUNT_US,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
