"""Cost of ``kubeacc plan --fixes``: every candidate change is one whole re-plan.

A cluster of N nodes x 8 GPUs, every GPU held by a one-GPU claim but one per node, and one
pending claim for 2 H100s, which no node has (freeing never helps; the search tries every
single claim, then pairs, up to its bound; relaxing the selector alone does not help either,
one free GPU per node; a node shape with two H100s does). Prints one JSON document: re-plans,
seconds for the search without node shapes and with them (the
profiles built and discovered once per plan), per node count.

Run: ``python bench/plan_fixes.py [--nodes 10 50]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from kubeacc.cli import planfix
from kubeacc.cli.plan import run_plan_explained

SELECTOR = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")'
GPU_CLASS = 'device.driver == "kubeacc.io" && device.attributes["kubeacc.io"].type == "gpu"'


def cluster(nodes: int) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.kubeacc.io"},
            "spec": {"selectors": [{"cel": {"expression": GPU_CLASS}}]},
        }
    ]
    for n in range(nodes):
        node = f"n{n}"
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {"type": {"string": "gpu"}, "model": {"string": "NVIDIA L4"}},
            }
            for i in range(8)
        ]
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": node},
                "spec": {
                    "driver": "kubeacc.io",
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
        for i in range(7):
            result = {"request": "g", "driver": "kubeacc.io", "pool": node, "device": f"gpu-{i}"}
            objs.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"held-{n}-{i}", "namespace": "ns"},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": [result]}}},
                }
            )
    request = {
        "name": "g",
        "exactly": {
            "deviceClassName": "gpu.kubeacc.io",
            "count": 2,
            "selectors": [{"cel": {"expression": SELECTOR}}],
        },
    }
    objs.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "want", "namespace": "default"},
            "spec": {"devices": {"requests": [request]}},
        }
    )
    return objs


def planner(objs: list[dict[str, Any]]) -> set[str]:
    return {p.claim for p, _ in run_plan_explained(objs, explain=False) if p.ok}


class NoShapes(planfix.NodeShapes):
    def shapes(self) -> list[tuple[str, str, list[dict[str, Any]], int]]:
        return []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 50])
    args = parser.parse_args()
    out: dict[str, Any] = {"max_runs": planfix.MAX_RUNS}
    for nodes in args.nodes:
        objs = cluster(nodes)
        start = time.perf_counter()
        plain = planner(objs)
        one = time.perf_counter() - start
        assert "default/want" not in plain
        start = time.perf_counter()
        fixes = planfix.find_fixes(objs, ["default/want"], planner, NoShapes(objs))
        search = time.perf_counter() - start
        start = time.perf_counter()
        shaped = planfix.find_fixes(objs, ["default/want"], planner, planfix.NodeShapes(objs))
        with_shapes = time.perf_counter() - start
        out[f"{nodes}x8"] = {
            "held_claims": nodes * 7,
            "one_plan_s": round(one, 4),
            "search_replans": fixes.tried,
            "search_cut": fixes.cut,
            "search_s": round(search, 3),
            "found": [f.kind for f in fixes.found],
            "with_node_shapes_replans": shaped.tried,
            "with_node_shapes_s": round(with_shapes, 3),
            "found_with_shapes": [f.kind for f in shaped.found],
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
