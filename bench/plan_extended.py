"""Cost of planning pods that ask an extended resource served through DRA.

A cluster of N nodes x 8 GPUs (a DeviceClass with ``extendedResourceName: kubeacc.io/gpu``) and
P pending pods of ``kubeacc.io/gpu: 2``, planned once as pods with limits (the special claim
built per node) and once as the same requests written as ResourceClaims, one per pod. Prints
one JSON document: seconds per plan and per pod for both, per node count.

Run: ``python bench/plan_extended.py [--nodes 50 500] [--pods 200]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kubeacc.cli.plan import run_plan_explained

GPU_CLASS = 'device.driver == "kubeacc.io" && device.attributes["kubeacc.io"].type == "gpu"'


def cluster(nodes: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.kubeacc.io"},
            "spec": {
                "selectors": [{"cel": {"expression": GPU_CLASS}}],
                "extendedResourceName": "kubeacc.io/gpu",
            },
        }
    ]
    for n in range(nodes):
        name = f"n{n}"
        objs.append({"kind": "Node", "metadata": {"name": name}, "status": {"allocatable": {}}})
        objs.append(
            {
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {
                    "driver": "kubeacc.io",
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}}
                        for i in range(8)
                    ],
                },
            }
        )
    return objs


def pods(count: int) -> list[dict[str, Any]]:
    return [
        {
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"kubeacc.io/gpu": "2"}}}]
            },
        }
        for i in range(count)
    ]


def claims(count: int) -> list[dict[str, Any]]:
    request = {"deviceClassName": "gpu.kubeacc.io", "count": 2}
    return [
        {
            "kind": "ResourceClaim",
            "metadata": {"name": f"c{i}", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}},
        }
        for i in range(count)
    ]


def timed(objs: list[dict[str, Any]]) -> tuple[float, int]:
    t0 = time.perf_counter()
    placed = sum(p.ok for p, _ in run_plan_explained(objs, explain=False))
    return time.perf_counter() - t0, placed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[50, 500])
    ap.add_argument("--pods", type=int, default=200)
    args = ap.parse_args()
    out = []
    for n in args.nodes:
        base = cluster(n)
        ext_s, ext_ok = timed(base + pods(args.pods))
        claim_s, claim_ok = timed(base + claims(args.pods))
        out.append(
            {
                "nodes": n,
                "pods": args.pods,
                "extended_s": round(ext_s, 3),
                "extended_placed": ext_ok,
                "claims_s": round(claim_s, 3),
                "claims_placed": claim_ok,
                "extended_ms_per_pod": round(1000 * ext_s / args.pods, 2),
                "claims_ms_per_pod": round(1000 * claim_s / args.pods, 2),
            }
        )
    print(json.dumps({"bench": "plan_extended", "results": out}, indent=2))


if __name__ == "__main__":
    main()
