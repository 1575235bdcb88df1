"""kube-scheduler's cost per pod on kube-acc's ResourceSlices against minimal ones (issue 30).

Prints one JSON object. Target (DESIGN.md): kube-scheduler CPU per pod with kube-acc's slices
<= 1.1x what it spends with minimal slices, at 500 nodes.

Each kind of slice gets its own testbed control plane (real kube-apiserver, kube-scheduler,
kube-controller-manager; no kubelet: pods are only scheduled), so that no kind's slices sit in
another's scheduler cache, with ``--nodes`` Node objects, each publishing one slice of:

- ``minimal``: the node's 8 GPUs with only what the ``gpu.kubeacc.io`` class selects on
  (``type``), no capacity;
- ``gpus``: the same 8 GPUs as the node agent publishes them (every attribute, memory);
- ``nics``: the GPUs and the 8 NICs (physical functions) as published, no VFs (the agent's
  default: VFs are published with ``--dra-publish vf`` only);
- ``all``: what the node agent publishes for the whole synthetic server (``dgx-h100``: 8 GPUs,
  8 NICs, 64 VFs, built with the agent's own functions);
- ``split``: the same devices as ``all``, the NICs and VFs in a pool (and slice) of their own,
  ``<node>-nic``: does a layout keep the scheduler from looking at them? (It does not: every
  Filter call gathers and converts every slice that targets the node, whatever its pool.)
- ``nics_dup``: ``nics`` with the attribute ``productName`` (a copy of ``model``) back on every
  device, as the agent published them before it kept a device's own attributes within one
  small Go map (docs/dra.md, *Devices and attributes*): the before of that change, same run.

Then ``--pods`` pods, each with its own claim for one GPU of ``gpu.kubeacc.io``, created as fast
as the API server takes them; timed from the first pod's creation until every pod is bound.
kube-scheduler's CPU time (``/proc/<pid>/stat``) over that window, less its idle rate measured
just before, divided by the pods: ms of scheduler CPU per pod. The kinds take turns
(``--rounds`` times each) so that the machine's load hits them alike; ``ratio_per_round`` divides
each kind's CPU per pod by ``minimal``'s of the same round (the load of a round hits both).

Run: ``python bench/scheduler_slices.py [--nodes 500] [--pods 200] [--rounds 1]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from kubeacc.agent.dra.classes import apply_device_classes
from kubeacc.agent.dra.devices import slice_devices
from kubeacc.agent.dra.slices import build_slices
from kubeacc.discovery import discover
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import cpu_seconds

TARGET_RATIO = 1.1
KINDS = ("minimal", "gpus", "nics", "all", "split", "nics_dup")
NS = "bench"


def kinds_of_devices(published: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The devices of one node's slice, per kind (see the module's text)."""
    gpus = [d for d in published if d["attributes"]["type"]["string"] == "gpu"]
    minimal = [{"name": d["name"], "attributes": {"type": {"string": "gpu"}}} for d in gpus]
    nics = [d for d in published if "sriovVF" not in d["attributes"]]
    dup = [
        {**d, "attributes": {**d["attributes"], "productName": d["attributes"]["model"]}}
        for d in nics
    ]
    return {
        "minimal": minimal,
        "gpus": gpus,
        "nics": nics,
        "all": published,
        "split": published,
        "nics_dup": dup,
    }


def node_slices(kind: str, node: str, devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The slice objects of one node: one pool, or for ``split`` the GPUs' and the NICs'."""
    if kind != "split":
        return build_slices(node, None, devices, generation=1)
    gpus = [d for d in devices if d["attributes"]["type"]["string"] == "gpu"]
    rest = [d for d in devices if d["attributes"]["type"]["string"] != "gpu"]
    out = build_slices(node, None, gpus, generation=1)
    for obj in build_slices(node, None, rest, generation=1):
        obj["metadata"]["name"] = obj["metadata"]["name"].replace(node, f"{node}-nic", 1)
        obj["spec"]["pool"]["name"] = f"{node}-nic"
        out.append(obj)
    return out


def _nodes(client: Client, kind: str, n: int, devices: list[dict[str, Any]]) -> None:
    room = {"cpu": "64", "memory": "512Gi", "pods": "250"}
    for i in range(n):
        name = f"node-{i:04d}"
        client.create(Node(metadata=ObjectMeta(name=name)))
        client.patch(
            Node.Status,
            name,
            {"status": {"capacity": room, "allocatable": room}},
            patch_type=PatchType.MERGE,
        )
        for obj in node_slices(kind, name, devices):
            client.create(from_dict(obj))


def _claim(name: str) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}]
                }
            },
        }
    )


def _pod(name: str) -> Any:
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "tolerations": [{"operator": "Exists"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        }
    )


def _round(kind: str, devices: list[dict[str, Any]], nodes: int, pods: int) -> dict[str, Any]:
    with Testbed.start(with_kubelet=False) as tb:
        client = tb.client()
        scheduler = tb.control_plane.scheduler
        assert scheduler is not None and scheduler.pid is not None
        pid = scheduler.pid
        apply_device_classes(client)
        t0 = time.perf_counter()
        _nodes(client, kind, nodes, devices)
        populate = time.perf_counter() - t0
        client.create(Namespace(metadata=ObjectMeta(name=NS)))
        names = [f"p{i:04d}" for i in range(pods)]
        for n in names:
            client.create(_claim(n))
        idle_from, idle_cpu = time.perf_counter(), cpu_seconds(pid)
        time.sleep(5)  # the scheduler's idle rate (informers, leases), subtracted below
        idle_rate = (cpu_seconds(pid) - idle_cpu) / (time.perf_counter() - idle_from)
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        for n in names:
            client.create(_pod(n))
        deadline = time.monotonic() + 900
        while True:
            bound = sum(1 for p in client.list(Pod, namespace=NS) if p.spec and p.spec.nodeName)
            if bound == pods:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: only {bound} of {pods} pods bound after 900 s")
            time.sleep(0.1)
        took = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0 - idle_rate * took
    return {
        "pods_per_s": round(pods / took, 2),
        "seconds": round(took, 2),
        "scheduler_cpu_ms_per_pod": round(cpu * 1000 / pods, 2),
        "scheduler_idle_cores": round(idle_rate, 4),
        "populate_s": round(populate, 1),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubeacc-bench-") as tmp:
        inv = discover(SyntheticHost(profiles.build("dgx-h100", Path(tmp) / "host")))
    devices = kinds_of_devices(slice_devices(inv))
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in args.kinds}
    load_before = round(os.getloadavg()[0], 2)
    for _ in range(args.rounds):
        for kind in args.kinds:
            runs[kind].append(_round(kind, devices[kind], args.nodes, args.pods))
    out: dict[str, Any] = {
        "benchmark": "scheduler_slices",
        "nodes": args.nodes,
        "pods": args.pods,
        "target_ratio": TARGET_RATIO,
        "load_1min_before": load_before,
        "devices_per_slice": {k: len(v) for k, v in devices.items()},
        "slice_bytes": {k: len(json.dumps(v)) for k, v in devices.items()},
    }
    for kind, rs in runs.items():
        out[kind] = {
            "cpu_ms_per_pod_median": statistics.median(r["scheduler_cpu_ms_per_pod"] for r in rs),
            "pods_per_s_median": statistics.median(r["pods_per_s"] for r in rs),
            "rounds": rs,
        }
    if "minimal" in runs:
        base = out["minimal"]["cpu_ms_per_pod_median"]
        out["cpu_per_pod_vs_minimal"] = {
            k: round(out[k]["cpu_ms_per_pod_median"] / base, 2) for k in runs if base > 0
        }
        out["ratio_per_round"] = {
            k: [
                round(r["scheduler_cpu_ms_per_pod"] / m["scheduler_cpu_ms_per_pod"], 2)
                for r, m in zip(rs, runs["minimal"], strict=True)
            ]
            for k, rs in runs.items()
            if k != "minimal"
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
