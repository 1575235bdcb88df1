"""Start-up time and memory of the multi-node testbed.

Prints one JSON object: the time from ``Testbed.start`` to every Node Ready, for one kubelet and
for the four node shapes of ``kubeacc.testbed.shapes``, and the resident memory of every
component (control plane once, kubelet + fake CRI per node), read from /proc after the nodes
have been Ready for ``--settle`` seconds.

    python bench/multinode.py [--settle 10] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from kubeacc.testbed import Testbed
from kubeacc.testbed.build import ensure_built
from kubeacc.testbed.shapes import multinode_options

MIB = 1024 * 1024


def _one(nodes: int, settle: float) -> dict[str, object]:
    t0 = time.monotonic()
    options = multinode_options()[:nodes] if nodes > 1 else None
    with Testbed.start(nodes=options) as tb:
        ready = time.monotonic() - t0
        time.sleep(settle)
        mem = tb.memory()
    per_node = {
        name: round((mem.get(f"kubelet {name}", 0) + mem.get(f"fake-cri {name}", 0)) / MIB, 1)
        for name in tb.node_names
    }
    control = sum(v for k, v in mem.items() if not k.startswith(("kubelet ", "fake-cri ")))
    return {
        "ready_s": round(ready, 1),
        "timings": {k: round(v, 1) for k, v in tb.timings.items()},
        "control_plane_rss_mib": round(control / MIB, 1),
        "node_rss_mib": per_node,
        "total_rss_mib": round(sum(mem.values()) / MIB, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--settle", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    ensure_built()
    result: dict[str, object] = {}
    for nodes in (1, len(multinode_options())):
        runs = [_one(nodes, args.settle) for _ in range(args.runs)]
        result[f"{nodes}_node"] = {
            "ready_s_median": statistics.median(float(str(r["ready_s"])) for r in runs),
            "runs": runs,
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
