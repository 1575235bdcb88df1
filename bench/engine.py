"""Benchmarks of the placement engine; prints one JSON document.

* best set of k devices on 8/16/32/64-device nodes (with NVLink-style links), time and score
  against exhaustive search where that is feasible;
* DRA allocation throughput on 500 nodes x 8 devices with a CEL selector and a matchAttribute
  constraint;
* time to a reasoned "no" for infeasible claims on the same cluster;
* side by side with kube-scheduler's allocator (the Go harness in tools/allocator, same inputs,
  same run, same procedure: nodes tried in rotation until 4 fit, the claim committed): claims/s
  and per-claim p50/p99 at 500 x 8 and 5,000 x 8 devices, and the time to a "no" on both;
  claims equal but for their names, claims each with a selector of its own, and pods of two
  such claims placed together (one Allocate call per node for both, as kube-scheduler does).

Run: ``python bench/engine.py [--claims N] [--side-by-side-claims N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from math import comb
from typing import Any

from kubeacc.differential.harness import GoAllocator
from kubeacc.engine.engine import Engine
from kubeacc.topology.bestset import exhaustive_best_set, graph_best_set
from kubeacc.topology.graph import TopologyGraph
from kubeacc.topology.layout import build_node

SHAPES = {8: (2, 2, 1, 2), 16: (2, 2, 2, 2), 32: (2, 2, 2, 4), 64: (4, 2, 2, 4)}
EXHAUSTIVE_LIMIT = 20000


def bench_best_set(seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for n, shape in SHAPES.items():
        # NVLink-style links between neighbours behind a switch, random lane counts.
        links = [(i, i + 1, rng.randint(1, 6)) for i in range(0, n - 1, 2)]
        g = TopologyGraph.from_inventory(build_node(*shape, links=links))
        rows = []
        for k in sorted({2, max(2, n // 4), n // 2, min(n - 1, 3 * n // 4)}):
            avail = sorted(rng.sample(range(n), max(k, (3 * n) // 4)))
            times = []
            res = graph_best_set(g, k, avail)
            for _ in range(5):
                t = time.perf_counter()
                res = graph_best_set(g, k, avail)
                times.append(time.perf_counter() - t)
            row: dict[str, Any] = {
                "k": k,
                "available": len(avail),
                "ms_median": round(statistics.median(times) * 1e3, 3),
                "ms_max": round(max(times) * 1e3, 3),
                "score": res.score,
                "proven_optimal": res.exact,
            }
            if comb(len(avail), k) <= EXHAUSTIVE_LIMIT:
                ref = exhaustive_best_set(g.closeness, k, avail)
                row["exhaustive_score"] = ref.score
                row["gap_pct"] = round(100 * (ref.score - res.score) / max(ref.score, 1), 3)
            rows.append(row)
        out[str(n)] = {
            "cases": rows,
            "ms_max": max(r["ms_max"] for r in rows),
            "worst_gap_pct": max((r.get("gap_pct", 0.0) for r in rows), default=0.0),
        }
    return out


Objs = list[dict[str, Any]]


def cluster(nodes: int = 500, per_node: int = 8) -> tuple[Objs, Objs]:
    slices = []
    for i in range(nodes):
        name = f"node-{i:03d}"
        devs = []
        for j in range(per_node):
            devs.append(
                {
                    "name": f"gpu-{j}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "model": {"string": "h100" if (i + j) % 4 else "a100"},
                        "numaNode": {"int": j // (per_node // 2)},
                        "driverVersion": {"version": "550.54.15"},
                        "resource.kubernetes.io/pcieRoot": {
                            "string": f"pci0000:{(j // 2) * 16 + 16:02x}"
                        },
                    },
                    "capacity": {"memory": {"value": "80Gi" if j % 2 == 0 or i % 3 else "40Gi"}},
                }
            )
        slices.append(
            {
                "metadata": {"name": f"{name}-gpus"},
                "spec": {
                    "driver": "kubeacc.io",
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": devs,
                },
            }
        )
    classes = [
        {
            "metadata": {"name": "gpu.kubeacc.io"},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.driver == "kubeacc.io" && '
                            'device.attributes["kubeacc.io"].type == "gpu"'
                        }
                    }
                ]
            },
        }
    ]
    return slices, classes


def claim(i: int, count: int, selector: str, match: str | None) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": "gpu.kubeacc.io",
                    "allocationMode": "ExactCount",
                    "count": count,
                    "selectors": [{"cel": {"expression": selector}}],
                },
            }
        ]
    }
    if match:
        devices["constraints"] = [{"matchAttribute": match}]
    return {"metadata": {"name": f"claim-{i}", "namespace": "bench"}, "spec": {"devices": devices}}


SELECTOR = (
    'device.capacity["kubeacc.io"].memory.compareTo(quantity("64Gi")) >= 0 && '
    'device.attributes["kubeacc.io"].model == "h100"'
)


def bench_allocation(n_claims: int) -> dict[str, Any]:
    slices, classes = cluster()
    t = time.perf_counter()
    eng = Engine(slices, classes, nodes=node_objects(500))
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    warm = eng.allocate(claim(-1, 2, SELECTOR, "resource.kubernetes.io/pcieRoot"))
    first_claim_s = time.perf_counter() - t
    ok = 1 if warm.ok else 0
    t = time.perf_counter()
    for i in range(n_claims):
        if eng.allocate(claim(i, 2, SELECTOR, "resource.kubernetes.io/pcieRoot")).ok:
            ok += 1
    dt = time.perf_counter() - t
    # Infeasible claims on the same (now partly full) cluster.
    no: dict[str, Any] = {}
    cases = {
        "matchAttribute_no_common_value": claim(0, 3, "true", "resource.kubernetes.io/pcieRoot"),
        "selector_matches_nothing": claim(
            1, 1, 'device.attributes["kubeacc.io"].model == "b200"', None
        ),
        "count_exceeds_node": claim(2, 9, SELECTOR, None),
        "new_selector_cold_cache": claim(
            3,
            5,
            'device.attributes["kubeacc.io"].driverVersion.isLessThan(semver("500.0.0"))',
            None,
        ),
    }
    for name, c in cases.items():
        t = time.perf_counter()
        p = eng.allocate(c, commit=False)
        ms = (time.perf_counter() - t) * 1e3
        assert not p.ok
        lines = p.explanation.lines() if p.explanation else []
        no[name] = {"ms": round(ms, 2), "reason": lines[0] if lines else ""}
    return {
        "nodes": 500,
        "devices_per_node": 8,
        "selector": SELECTOR,
        "constraint": "matchAttribute resource.kubernetes.io/pcieRoot",
        "load_s": round(load_s, 3),
        "first_claim_s_cold_cel": round(first_claim_s, 3),
        "claims": n_claims,
        "allocated": ok,
        "claims_per_s": round(n_claims / dt, 1),
        "infeasible": no,
        "infeasible_ms_max": max(v["ms"] for v in no.values()),
    }


def node_objects(nodes: int) -> Objs:
    return [
        {
            "metadata": {
                "name": f"node-{i:03d}",
                "labels": {"kubernetes.io/hostname": f"node-{i:03d}"},
            }
        }
        for i in range(nodes)
    ]


def _latency(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "claims_per_s": round(len(seconds) / sum(seconds), 1),
        "p50_ms": round(ordered[len(ordered) // 2] * 1e3, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3, 3),
    }


def bench_side_by_side(
    nodes: int, n_claims: int, go: GoAllocator, distinct: bool = False, pod_size: int = 1
) -> dict[str, Any]:
    """The engine and the scheduler's allocator on the same cluster and claims, interleaved
    by phase in one run; the first (warm-up) pod of each is left out of the numbers.

    Claims are equal but for their names (pods of one template), or with ``distinct`` each has
    a selector of its own, so the engine can reuse no answer from an earlier claim. With
    ``pod_size`` > 1 the claims are cut into pods of that many, each pod's claims placed
    together (``n_claims`` pods then); rates are pods/s."""
    slices, classes = cluster(nodes)
    node_objs = node_objects(nodes)
    claims = [
        claim(
            i,
            2,
            SELECTOR + (f' && device.attributes["kubeacc.io"].model != "m{i}"' if distinct else ""),
            "resource.kubernetes.io/pcieRoot",
        )
        for i in range((n_claims + 1) * pod_size)
    ]
    pods = [list(range(i, i + pod_size)) for i in range(0, len(claims), pod_size)]
    eng = Engine(slices, classes, nodes=node_objs, max_feasible_nodes=4)
    ours: list[float] = []
    ours_ok = 0
    for pod in pods:
        t = time.perf_counter()
        if pod_size == 1:
            ok = eng.allocate(claims[pod[0]]).ok
        else:
            ok = eng.allocate_pod([claims[i] for i in pod]).ok
        ours.append(time.perf_counter() - t)
        ours_ok += ok
    scenario = {"slices": slices, "classes": classes, "nodes": node_objs, "allocated": []}
    grouping = {"pods": pods} if pod_size > 1 else {}
    theirs = go.run(
        {**scenario, "mode": "plan", "maxFeasibleNodes": 4, "claims": claims, **grouping}
    )
    placements = theirs["placements"]
    theirs_ok = sum(1 for p in placements if p.get("allocation") or p.get("allocations"))
    no_claim = claim(10**6, 3, "true", "resource.kubernetes.io/pcieRoot")
    t = time.perf_counter()
    no = eng.allocate(no_claim, commit=False)
    no_ms = (time.perf_counter() - t) * 1e3
    go_no = go.run({**scenario, "mode": "plan", "maxFeasibleNodes": 4, "claims": [no_claim]})
    ours_stats = _latency(ours[1:])
    theirs_stats = _latency([p["seconds"] for p in placements[1:]])
    return {
        "nodes": nodes,
        "devices_per_node": 8,
        "claims": n_claims,
        "distinct_claims": distinct,
        "claims_per_pod": pod_size,
        "engine": {**ours_stats, "allocated": ours_ok},
        "go_allocator": {**theirs_stats, "allocated": theirs_ok},
        "engine_vs_go_claims_per_s": round(
            ours_stats["claims_per_s"] / theirs_stats["claims_per_s"], 2
        ),
        "no": {
            "engine_ms": round(no_ms, 2),
            "engine_reason": (no.explanation.lines() if no.explanation else [""])[0],
            "go_ms": round(go_no["placements"][0]["seconds"] * 1e3, 2),
            "both_say_no": not no.ok and not go_no["placements"][0].get("allocation"),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=600)
    ap.add_argument("--side-by-side-claims", type=int, default=1000)
    ap.add_argument("--shapes", default="500,5000", help="node counts for the side-by-side")
    ap.add_argument(
        "--distinct-claims", type=int, default=300, help="claims, each its own selector"
    )
    ap.add_argument(
        "--pods", type=int, default=150, help="pods of two claims, each its own selector"
    )
    ap.add_argument(
        "--only-distinct",
        action="store_true",
        help="only the side-by-side runs with distinct claims and pods",
    )
    args = ap.parse_args()
    out: dict[str, Any] = {}
    if not args.only_distinct:
        out["best_set"] = bench_best_set()
        out["allocation"] = bench_allocation(args.claims)
    with GoAllocator() as go:
        shapes = [int(n) for n in args.shapes.split(",")]
        if not args.only_distinct:
            out["side_by_side"] = [
                bench_side_by_side(n, args.side_by_side_claims, go) for n in shapes
            ]
        out["side_by_side_distinct_claims"] = [
            bench_side_by_side(n, args.distinct_claims, go, distinct=True) for n in shapes
        ]
        out["side_by_side_distinct_pods"] = [
            bench_side_by_side(n, args.pods, go, distinct=True, pod_size=2) for n in shapes
        ]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
