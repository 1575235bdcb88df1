"""kube-scheduler throughput for memory-shared claims against whole-GPU claims, in one run.

Prints one JSON object. A testbed control plane (real kube-apiserver, kube-scheduler,
kube-controller-manager; no kubelet: the pods are only scheduled), ``NODES`` Node objects per
kind, each with the ResourceSlice the node agent publishes for the synthetic 8-GPU server
(``dgx-h100``: 8 H100, 8 NICs, 64 VFs), built with the agent's own functions: the "whole" nodes
as the agent publishes by default, the "shared" nodes as with ``--memory-shared all``. Then
``CLAIMS`` claims of each kind (a whole GPU: ``!device.allowMultipleAllocations``; a share:
20G / 10 % of a shared GPU) and one pod per claim, created as fast as the API server takes
them; timed from the first pod's creation until every pod of the kind is bound. The kinds take
turns (whole, shared, whole, shared ...) so that load on the machine hits both alike.

Run: ``python bench/dra_shared_scheduler.py [--claims 200] [--nodes 25] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from kubeacc.agent.dra.classes import apply_device_classes
from kubeacc.agent.dra.devices import slice_devices
from kubeacc.agent.dra.sharing.limits import parse_selectors
from kubeacc.agent.dra.slices import build_slices
from kubeacc.discovery import discover
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed import Testbed

SHARE = {"kubeacc.io/memory": "20G", "kubeacc.io/cores": "10"}


def _nodes(client: Client, kind: str, n: int, devices: list[dict[str, Any]]) -> None:
    for i in range(n):
        name = f"{kind}-{i:02d}"
        client.create(Node(metadata=ObjectMeta(name=name, labels={"bench": kind})))
        room = {"cpu": "64", "memory": "512Gi", "pods": "250"}
        client.patch(
            Node.Status,
            name,
            {"status": {"capacity": room, "allocatable": room}},
            patch_type=PatchType.MERGE,
        )
        for obj in build_slices(name, None, devices, generation=1):
            client.create(from_dict(obj))


def _claim(name: str, ns: str, shared: bool) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.kubeacc.io"}
    if shared:
        exactly["selectors"] = [{"cel": {"expression": "device.allowMultipleAllocations"}}]
        exactly["capacity"] = {"requests": SHARE}
    else:
        exactly["selectors"] = [{"cel": {"expression": "!device.allowMultipleAllocations"}}]
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
    )


def _pod(name: str, ns: str) -> Any:
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
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


def _round(client: Client, ns: str, shared: bool, claims: int) -> dict[str, float]:
    client.create(Namespace(metadata=ObjectMeta(name=ns)))
    names = [f"p{i:03d}" for i in range(claims)]
    for n in names:
        client.create(_claim(n, ns, shared))
    t0 = time.perf_counter()
    for n in names:
        client.create(_pod(n, ns))
    created = time.perf_counter() - t0
    deadline = time.monotonic() + 600
    while True:
        pods = list(client.list(Pod, namespace=ns))
        bound = sum(1 for p in pods if p.spec and p.spec.nodeName)
        if bound == claims:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ns}: only {bound} of {claims} pods bound after 600 s")
        time.sleep(0.05)
    took = time.perf_counter() - t0
    nodes = {p.spec.nodeName for p in pods if p.spec}
    _clean(client, ns, names)
    return {
        "seconds": round(took, 2),
        "pods_per_s": round(claims / took, 1),
        "create_s": round(created, 2),
        "nodes_used": len(nodes),
    }


def _clean(client: Client, ns: str, names: list[str]) -> None:
    """Pods gone at once (no kubelet to wait for), claims deallocated and gone."""
    for n in names:
        client.delete(Pod, n, namespace=ns, grace_period=0)
    client.delete(Namespace, ns)
    deadline = time.monotonic() + 300
    while any(True for _ in client.list(ResourceClaim, namespace=ns)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ns}: claims still there after 300 s")
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=25)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubeacc-bench-") as tmp:
        inv = discover(SyntheticHost(profiles.build("dgx-h100", Path(tmp) / "host")))
        whole = slice_devices(inv)
        shared = slice_devices(inv, parse_selectors(["all"]))
        with Testbed.start(with_kubelet=False) as tb:
            client = tb.client()
            apply_device_classes(client)
            _nodes(client, "whole", args.nodes, whole)
            _nodes(client, "shared", args.nodes, shared)
            n_slices = len(list(client.list(ResourceSlice)))
            runs: dict[str, list[dict[str, float]]] = {"whole": [], "shared": []}
            for r in range(args.rounds):
                for kind in ("whole", "shared"):
                    runs[kind].append(_round(client, f"{kind}-{r}", kind == "shared", args.claims))
    out: dict[str, Any] = {
        "benchmark": "dra_shared_scheduler",
        "claims_per_round": args.claims,
        "nodes": {"whole": args.nodes, "shared": args.nodes},
        "slices": n_slices,
        "devices_per_node": len(whole),
        "share": SHARE,
    }
    for kind, rs in runs.items():
        out[kind] = {
            "pods_per_s_median": round(statistics.median(r["pods_per_s"] for r in rs), 1),
            "rounds": rs,
        }
    out["python"] = sys.version.split()[0]
    out["cpus"] = os.cpu_count()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
