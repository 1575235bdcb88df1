"""kubeacc extender: process RSS after its watch caches synced, whole vs kept objects. Prints JSON.

Starts the testbed control plane (no kubelet) and fills its API server with ``--nodes`` Node
objects, 8 Accelerators per node (the dgx-h100 synthetic host's H100s, with the status a
life-cycle agent writes: device, conditions, lastSeen) and ``--pods`` pods spread over the nodes
and 10 namespaces, created bound (``spec.nodeName``) with a status as a kubelet writes it
(conditions, container statuses, IPs); ``--gpu-fraction`` of them hold a GPU through the
decision annotation (a memory share or one whole GPU), the rest ask for none. Pods tolerate
every taint, so the node lifecycle controller does not evict them from kubelet-less nodes.

Then, ``--rounds`` times, alternating which goes first, a fresh extender process
(:class:`kubeacc.extender.runner.ExtenderRunner`, plain HTTP, no leader election) of each
kind: ``kept`` (this code: caches of :mod:`kubeacc.extender.kept`'s fields, LISTs in pages)
and ``whole`` (whole objects, one LIST per kind: the code before). Each reports its RSS before
the lists and once synced (after a full collection), its peak RSS, the time to synced, the
state's counts and the cached objects' deep size per Accelerator and per pod. ``uptime``'s
load is recorded with every run.

    python bench/extender_memory.py [--nodes 1000] [--pods 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

from apiload import deep_bytes  # bench/, the script's directory
from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.wants import GPU, MEMORY, Assigned, Decision
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, install_crds
from kubeacc.discovery import discover
from kubeacc.extender import kept
from kubeacc.extender.kube import Inventory
from kubeacc.extender.runner import ExtenderRunner
from kubeacc.model import Device, DeviceType
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import rss_bytes

MB = 1024 * 1024
T0 = "2026-01-01T00:00:00Z"
NAMESPACES = [f"bench-mem-{i}" for i in range(10)]


def _load() -> list[float]:
    """``uptime``'s load averages (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _gpus() -> list[Device]:
    host = profiles.build("dgx-h100", Path(tempfile.mkdtemp(prefix="kubeacc-bench-")) / "h")
    return [d for d in discover(SyntheticHost(host)).devices if d.type is DeviceType.GPU]


def _accelerator(client: Client, node: str, dev: Device, made: Any) -> None:
    """Create one Accelerator (``made``) and write its status, as the life-cycle agent does."""
    name = f"{node}-{dev.name}"
    client.create(made)
    present = {"type": "Present", "status": "True", "reason": "Discovered", "message": ""}
    status = {
        "device": dev.to_json_dict(),
        "hostDriver": "nvidia",
        "lastSeen": T0,
        "allocatedTo": [],
        "conditions": [{**present, "lastTransitionTime": T0}],
    }
    client.patch(Accelerator.Status, name, {"status": status}, patch_type=PatchType.MERGE)


def _pod(i: int, node: str, dev: Device | None, share: bool) -> tuple[dict[str, Any], str]:
    """A pod bound to ``node`` (holding ``dev`` when given) and its namespace."""
    name = f"pod-{i:06d}"
    limits: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    notes = {"example.com/team": "ml", "kubectl.kubernetes.io/restartedAt": T0}
    if dev is not None and dev.pci is not None:
        bdf = (dev.pci.bus_id,)
        if share:
            limits[MEMORY] = "8192"
            got = Assigned("main", bdf, memory=8192)
        else:
            limits[GPU] = "1"
            got = Assigned("main", bdf, whole=True)
        notes[DECISION_ANNOTATION] = Decision(node, (got,), at=1.0).to_json()
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": f"app-{i % 50}", "pod-template-hash": "5d8f7c9b6"},
            "annotations": notes,
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/infer:1.0",
                    "command": ["python", "-m", "serve", "--port", "8000"],
                    "env": [{"name": f"VAR_{k}", "value": "x" * 16} for k in range(10)],
                    "ports": [{"containerPort": 8000, "name": "http"}],
                    "resources": {"limits": limits},
                },
                {
                    "name": "log",
                    "image": "registry.example/log:1",
                    "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
                },
            ],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    return body, NAMESPACES[i % len(NAMESPACES)]


def _pod_status(i: int) -> dict[str, Any]:
    """What a kubelet writes of a running pod."""
    conds = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    return {
        "phase": "Running",
        "conditions": [{"type": c, "status": "True", "lastTransitionTime": T0} for c in conds],
        "hostIP": "192.168.0.1",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": T0,
        "containerStatuses": [
            {
                "name": n,
                "image": f"registry.example/{n}:1",
                "imageID": f"registry.example/{n}@sha256:{'ab' * 32}",
                "containerID": f"containerd://{i:064x}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": T0}},
            }
            for n in ("main", "log")
        ],
    }


def populate(
    tb: Testbed, nodes: int, pods: int, gpu_fraction: float, writers: int
) -> dict[str, Any]:
    gpus = _gpus()
    clients = [tb.client(field_manager="bench") for _ in range(writers)]
    install_crds(clients[0])
    for ns in NAMESPACES:
        clients[0].create(Namespace(metadata=ObjectMeta(name=ns)))
    names = [f"mem-{i:05d}" for i in range(nodes)]
    rng = random.Random(17)
    t0 = time.monotonic()

    def node(i: int) -> None:
        clients[i % writers].create(Node(metadata=ObjectMeta(name=names[i])))

    # lightkube's from_dict resolves its types on first use, which crashed the interpreter
    # (SIGSEGV) when threads did it at once: every object is made here, in this thread.
    made = [
        Accelerator.from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": "Accelerator",
                "metadata": {"name": f"{n}-{d.name}", "labels": {"kubeacc.io/node": n}},
                "spec": {"node": n, "deviceName": d.name},
            }
        )
        for n in names
        for d in gpus
    ]

    def accelerator(i: int) -> None:
        _accelerator(clients[i % writers], names[i // len(gpus)], gpus[i % len(gpus)], made[i])

    plan = [(rng.random() < gpu_fraction, rng.random() < 0.5) for _ in range(pods)]
    bodies = [
        _pod(i, names[i % nodes], gpus[i % len(gpus)] if plan[i][0] else None, plan[i][1])
        for i in range(pods)
    ]
    pod_objs = [Pod.from_dict(body) for body, _ in bodies]

    def pod(i: int) -> None:
        body, ns = bodies[i]
        c = clients[i % writers]
        c.create(pod_objs[i], namespace=ns)  # type: ignore[call-overload]
        c.patch(
            Pod.Status,
            body["metadata"]["name"],
            {"status": _pod_status(i)},
            namespace=ns,
            patch_type=PatchType.MERGE,
        )

    with futures.ThreadPoolExecutor(writers) as pool:
        # the first of each kind in this thread: lightkube builds its decoders on first use
        for fn, count in ((node, nodes), (accelerator, nodes * len(gpus)), (pod, pods)):
            fn(0)
            list(pool.map(fn, range(1, count)))
    return {
        "nodes": nodes,
        "accelerators": nodes * len(gpus),
        "pods": pods,
        "pods_holding": sum(h for h, _ in plan),
        "populate_s": round(time.monotonic() - t0, 1),
    }


def extender_only(kubeconfig: Path, mode: str, accelerators: int, pods: int) -> dict[str, Any]:
    """One extender (in this process) until synced; its memory."""
    client = Client(KubeConfig.from_file(kubeconfig), field_manager="kubeacc-extender")
    runner = ExtenderRunner(client, "127.0.0.1", 0, identity="bench", leader_elect=False)
    if mode == "whole":  # the code before kubeacc/extender/kept.py
        runner.inventory = Inventory(
            client, runner.state, keep_accelerator=kept.whole, keep_pod=kept.whole, page=None
        )
    gc.collect()
    rss_before = rss_bytes(os.getpid())
    t0 = time.monotonic()
    runner.start()
    try:
        inv = runner.inventory

        while not (
            inv.synced()
            and len(inv.accelerators.items()) >= accelerators
            and len(inv.pods.items()) >= pods
        ):  # synced: listed and the state built from the LISTs (Inventory.not_ready)
            if time.monotonic() - t0 > 600:
                raise TimeoutError("the extender's caches did not sync")
            time.sleep(0.05)
        synced_s = time.monotonic() - t0
        gc.collect()
        time.sleep(1.0)
        rss = rss_bytes(os.getpid())
        accs, cached = inv.accelerators.items(), inv.pods.items()
        return {
            "mode": mode,
            "load": _load(),
            "summary": runner.state.summary(),
            "list_to_synced_s": round(synced_s, 2),
            "rss_mb_before_lists": round(rss_before / MB, 1),
            "rss_mb": round(rss / MB, 1),
            "peak_rss_mb": round(_peak_rss() / MB, 1),
            "cache_bytes_per_accelerator": round(deep_bytes(accs) / max(1, len(accs))),
            "cache_bytes_per_pod": round(deep_bytes(cached) / max(1, len(cached))),
        }
    finally:
        runner.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=4000)
    ap.add_argument("--gpu-fraction", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--extender-only", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.extender_only:
        cfg, mode, accs, pods = args.extender_only
        print(json.dumps(extender_only(Path(cfg), mode, int(accs), int(pods))))
        return
    tb = Testbed.start(with_kubelet=False)
    try:
        result: dict[str, Any] = {"load_before": _load()}
        result.update(populate(tb, args.nodes, args.pods, args.gpu_fraction, args.writers))
        result["load_after_populate"] = _load()
        runs = []
        for k in range(args.rounds):
            for mode in ("kept", "whole") if k % 2 == 0 else ("whole", "kept"):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--extender-only",
                        str(tb.kubeconfig),
                        mode,
                        str(result["accelerators"]),
                        str(args.pods),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=900,
                ).stdout
                runs.append(json.loads(out))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        result["runs"] = runs
        for mode in ("kept", "whole"):
            mine = [r for r in runs if r["mode"] == mode]
            result[mode] = {
                key: sorted(r[key] for r in mine)
                for key in ("rss_mb", "peak_rss_mb", "list_to_synced_s", "rss_mb_before_lists")
            }
        print(json.dumps(result, indent=1))
    finally:
        tb.stop()


if __name__ == "__main__":
    main()
