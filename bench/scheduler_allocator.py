"""The part of kube-scheduler's per-pod cost that the published slices decide, in isolation.

``bench/scheduler_slices.py`` measures the whole kube-scheduler, whose CPU per pod is mostly
framework work that does not depend on the slices, on a machine whose load moves it by 20 %.
This benchmark runs only the DRA allocator kube-scheduler v1.37.2 runs (the Go harness of
``tools/allocator``, built by ``python -m kubeacc.differential.build``), in ``plan`` mode: for
each pod one allocator over every slice, then ``Allocate`` on node after node until as many
nodes fit as kube-scheduler looks for (``numFeasibleNodesToFind``: 46 % of 500 nodes, 230), as
its Filter calls do. The slices are ``bench/scheduler_slices.py``'s kinds, built the same way.

Prints one JSON object: per kind the harness's CPU time per pod (the whole process over all
pods: garbage collection included, other processes' load not; min and median over ``--rounds``
rounds, the kinds taking turns), the ratio to ``minimal`` of the same round (median over the
rounds), and the wall time per pod (median over the pods of a round), which the load moves.

Run: ``python bench/scheduler_allocator.py [--nodes 500] [--pods 100] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.classes import device_classes
from kubeacc.agent.dra.devices import slice_devices
from kubeacc.differential.build import ensure_built
from kubeacc.discovery import discover
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost

sys.path.insert(0, str(Path(__file__).parent))
from scheduler_slices import KINDS, kinds_of_devices, node_slices


def feasible_nodes(nodes: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with its default adaptive percentage."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(nodes * percentage // 100, 100)


def scenario(kind: str, devices: list[dict[str, Any]], nodes: int, pods: int) -> str:
    """One harness input line: ``nodes`` nodes publishing ``devices``, ``pods`` 1-GPU claims."""
    names = [f"node-{i:04d}" for i in range(nodes)]
    slices = [obj for n in names for obj in node_slices(kind, n, devices)]
    request = {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "ExactCount", "count": 1}
    claims = [
        {
            "metadata": {"name": f"c{i}", "namespace": "bench", "uid": f"uid-{i}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        }
        for i in range(pods)
    ]
    return json.dumps(
        {
            "mode": "plan",
            "slices": slices,
            "classes": device_classes(),
            "nodes": [{"metadata": {"name": n}} for n in names],
            "claims": claims,
            "maxFeasibleNodes": feasible_nodes(nodes),
        }
    )


def run(binary: Path, line: str, kind: str, pods: int) -> tuple[float, float]:
    """CPU ms per pod and wall ms per pod (median over the pods) of one harness run; every pod
    must be placed."""
    done = subprocess.run(
        [str(binary)], input=line + "\n", capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{kind}: allocator harness failed: {done.stderr.strip()}")
    out = json.loads(done.stdout)
    placed = [p for p in out.get("placements", []) if p.get("node")]
    if out.get("error") or len(placed) != pods:
        raise RuntimeError(f"{kind}: {len(placed)} of {pods} pods placed: {out.get('error')}")
    wall = statistics.median(p["seconds"] for p in placed) * 1000
    return float(out["cpuSeconds"]) * 1000 / pods, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = ap.parse_args()
    kinds = ["minimal", *[k for k in args.kinds if k != "minimal"]]
    binary = ensure_built()
    with tempfile.TemporaryDirectory(prefix="kubeacc-bench-") as tmp:
        inv = discover(SyntheticHost(profiles.build("dgx-h100", Path(tmp) / "host")))
    devices = kinds_of_devices(slice_devices(inv))
    lines = {k: scenario(k, devices[k], args.nodes, args.pods) for k in kinds}
    runs: dict[str, list[float]] = {k: [] for k in kinds}
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    load_before = round(os.getloadavg()[0], 2)
    for _ in range(args.rounds):
        for kind in kinds:
            cpu, wall = run(binary, lines[kind], kind, args.pods)
            runs[kind].append(cpu)
            walls[kind].append(wall)
    out: dict[str, Any] = {
        "benchmark": "scheduler_allocator",
        "nodes": args.nodes,
        "pods": args.pods,
        "feasible_nodes": feasible_nodes(args.nodes),
        "load_1min_before": load_before,
        "load_1min_after": round(os.getloadavg()[0], 2),
    }
    for kind, ms in runs.items():
        ratios = [m / b for m, b in zip(ms, runs["minimal"], strict=True)]
        out[kind] = {
            "cpu_ms_per_pod_min": round(min(ms), 3),
            "cpu_ms_per_pod_median": round(statistics.median(ms), 3),
            "ratio_median": round(statistics.median(ratios), 3),
            "cpu_ms_per_round": [round(m, 3) for m in ms],
            "wall_ms_per_pod_median": round(statistics.median(walls[kind]), 3),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
