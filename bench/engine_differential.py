"""The engine against kube-scheduler's allocator on thousands of generated scenarios; JSON out.

Same comparison as tests/differential (errors that fail the pod and feasibility per pod and node,
the engine's allocations the scheduler's own or validated by the scheduler's allocator), on a
larger seed range, with the generator's coverage
per feature and the first disagreements if any.

Run: ``python bench/engine_differential.py [--start S] [--scenarios N]``; the allocator is
v1.37.2's unless ``KUBEACC_ALLOCATOR_VERSION=1.36``, with its release's default gates unless
``KUBEACC_ALLOCATOR_GATES`` names others (``DRADeviceCompatibilityGroups=true``; the engine
follows them too).
"""

from __future__ import annotations

import argparse
import json
import time

from kubeacc.differential.build import harness
from kubeacc.differential.compare import run_range


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--start", type=int, default=1000)
    ap.add_argument("--scenarios", type=int, default=5000)
    args = ap.parse_args()
    t = time.perf_counter()
    report = run_range(args.start, args.scenarios)
    out = {
        "allocator": harness().release,
        "gates": dict(harness().gates),
        "seeds": [args.start, args.start + args.scenarios],
        **report.summary(),
        "seconds": round(time.perf_counter() - t, 1),
        "first_disagreements": report.disagreements[:5],
        "first_invalid_picks": report.invalid_picks[:5],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
