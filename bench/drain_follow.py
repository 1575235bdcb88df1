"""What following drains costs the controller: its watch cache of kubeacc.io's ResourceSlices
and the look for partitions and VFs without a drain rule (kubeacc.controller.drainfollow).

Every node is the synthetic ``dgx-h100`` (GPUs, NICs with their SR-IOV VFs published, as with
``--dra-publish vf``), its slices built by the agent's own code and decoded from JSON per node,
kept as the watch cache keeps them: device names only (:func:`slice_names`). Measured
in-process, no API server: the memory of the slices (tracemalloc); the time of
:func:`kubeacc.controller.taintrules.missing` over all of them with ``--drains`` devices
drained (a pass while an Accelerator is cordoned; the LIST of the rules before it is not
counted); the watch's ``wake_if`` on a slice update that keeps the device names (a taint
change; the cut of the event included). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.devices import slice_devices
from kubeacc.agent.dra.slices import build_slices
from kubeacc.controller.taintrules import (
    derived,
    device_names_changed,
    missing,
    rule,
    slice_names,
)
from kubeacc.discovery import discover
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost


def node_slices(devices: list[dict[str, Any]], nodes: int) -> list[dict[str, Any]]:
    """Each node's slices, decoded from JSON per node (no object shared between nodes), as
    the controller's cache holds them (:func:`slice_names`)."""
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        text = json.dumps(build_slices(f"node-{i:05d}", None, devices, generation=1))
        decoded = json.loads(text)
        out.extend(slice_names(s) for s in decoded)
    return out


def drain_rules(devices: list[dict[str, Any]], drains: int) -> list[dict[str, Any]]:
    """The rules of ``drains`` drained NICs and GPUs on as many nodes, with their partitions'
    and VFs' rules, as a drain makes them."""
    names = [str(d["name"]) for d in devices]
    parents = [n for n in names if derived(n, names)]
    rules = []
    for i in range(drains):
        node, device = f"node-{i:05d}", parents[i % len(parents)]
        acc = f"{node}-{device}"
        rules.append(rule(acc, node, device, "ops/drain"))
        for name in derived(device, names):
            rules.append(rule(acc, node, name, "ops/drain", name[len(device) + 1 :]))
    return rules


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--drains", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        inv = discover(SyntheticHost(profiles.build("dgx-h100", Path(tmp) / "host")))
    devices = slice_devices(inv, vfs=True)
    load_before = round(os.getloadavg()[0], 2)

    tracemalloc.start()
    slices = node_slices(devices, args.nodes)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    rules = drain_rules(devices, args.drains)
    # a partition's or VF's rule of each drain taken away: what the pass has to find
    lacking = [r for r in rules if not r["metadata"]["name"].endswith("-vf0")]
    passes = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        made = missing(lacking, slices)
        passes.append(time.perf_counter() - start)
    assert len(made) == len(rules) - len(lacking), (len(made), len(rules), len(lacking))

    whole = build_slices("node-00000", None, devices, generation=1)[0]
    tainted = json.loads(json.dumps(whole))
    tainted["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    old = slice_names(whole)
    wakes = []
    for _ in range(args.repeats * 50):
        start = time.perf_counter()
        new = slice_names(tainted)  # the cache cuts each event
        woke = device_names_changed(old, new)
        wakes.append(time.perf_counter() - start)
    assert not woke

    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "devices_per_node": len(devices),
                "slices": len(slices),
                "drains": args.drains,
                "rules_in_force": len(lacking),
                "rules_found_missing": len(made),
                "slice_cache_mb": round(held / 2**20, 1),
                "slice_cache_kb_per_node": round(held / 2**10 / args.nodes, 1),
                "pass_ms": {
                    "p50": round(statistics.median(passes) * 1e3, 1),
                    "max": round(max(passes) * 1e3, 1),
                },
                "wake_if_us": {
                    "p50": round(statistics.median(wakes) * 1e6, 1),
                    "max": round(max(wakes) * 1e6, 1),
                },
                "load": [load_before, round(os.getloadavg()[0], 2)],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
