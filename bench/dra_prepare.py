"""DRA NodePrepareResources latency and node-agent memory.

Prints one JSON object. Targets (DESIGN.md): NodePrepareResources for 1 claim / 1 device,
CDI write + durable checkpoint, over the unix socket: p99 <= 5 ms; agent steady-state RSS
<= 60 MB.

Set-up: a testbed control plane (real kube-apiserver; no kubelet is needed), a Node object, a
ResourceClaim whose status is allocated one device of the node's pool (written through the
status subresource, as the scheduler would), and ``kubeacc agent`` as a subprocess on a
synthetic 8-GPU server. The benchmark is the kubelet's side: a gRPC client on the plugin's
unix socket calling NodePrepareResources then NodeUnprepareResources; only prepare is timed.
Each prepare is a full one: the claim is read from the API server, checked, its CDI spec written
and the checkpoint replaced durably (fsync of file and directory) before the answer.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from kubelet_client import stubs
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.kubeletapi import dra_v1_pb2 as v1
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed

NODE = "bench-node"
DEVICE = "gpu-0000-1b-00-0"
TARGET_P99_MS = 5.0
TARGET_RSS_MB = 60.0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _claim(client: Any, ns: str) -> str:
    client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "bench", "namespace": ns},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}
                        ]
                    }
                },
            }
        )
    )
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "kubeacc.io", "pool": NODE, "device": DEVICE}
                ]
            }
        }
    }
    client.patch(
        ResourceClaim.Status, "bench", {"status": status}, namespace=ns, patch_type=PatchType.MERGE
    )
    return str(client.get(ResourceClaim, "bench", namespace=ns).metadata.uid)


def main(runs: int = 300) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory(prefix="kubeacc-bench-") as tmp,
        Testbed.start(with_kubelet=False) as tb,
    ):
        work = Path(tmp)
        client = tb.client()
        client.create(Node(metadata=ObjectMeta(name=NODE)))
        client.create(Namespace(metadata=ObjectMeta(name="bench")))
        uid = _claim(client, "bench")
        host = profiles.build("dgx-h100", work / "host")
        kubelet_root = work / "kubelet"
        log = (work / "agent.log").open("wb")
        agent = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "kubeacc"),
                "agent",
                f"--node-name={NODE}",
                f"--host-root={host}",
                f"--kubeconfig={tb.kubeconfig}",
                f"--kubelet-root={kubelet_root}",
                f"--cdi-dir={work / 'cdi'}",
                f"--state-dir={work / 'state'}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sock = kubelet_root / "plugins" / "kubeacc.io" / "dra.sock"
        try:
            deadline = time.monotonic() + 30
            while not sock.exists():
                if time.monotonic() > deadline or agent.poll() is not None:
                    raise RuntimeError((work / "agent.log").read_text())
                time.sleep(0.05)
            claim = v1.Claim(namespace="bench", name="bench", uid=uid)
            prep = v1.NodePrepareResourcesRequest(claims=[claim])
            unprep = v1.NodeUnprepareResourcesRequest(claims=[claim])
            times: list[float] = []
            with grpc.insecure_channel(f"unix://{sock}") as ch:
                stub = stubs("dra_v1_pb2_grpc").DRAPluginStub(ch)
                for i in range(runs + 20):
                    t0 = time.perf_counter()
                    resp = stub.NodePrepareResources(prep, timeout=10)
                    dt = (time.perf_counter() - t0) * 1000
                    if resp.claims[uid].error:
                        raise RuntimeError(resp.claims[uid].error)
                    if i >= 20:  # warm-up: connections, imports, page cache
                        times.append(dt)
                    stub.NodeUnprepareResources(unprep, timeout=10)
            time.sleep(7)  # a re-discovery cycle or so: steady state
            rss = _rss_mb(agent.pid)
        finally:
            agent.terminate()
            agent.wait(15)
            log.close()
    p50, p99 = _pct(times, 0.5), _pct(times, 0.99)
    return {
        "benchmark": "dra_prepare",
        "claims_per_call": 1,
        "devices_per_claim": 1,
        "runs": runs,
        "prepare_ms": {
            "p50": round(p50, 3),
            "p90": round(_pct(times, 0.9), 3),
            "p99": round(p99, 3),
            "max": round(max(times), 3),
            "mean": round(statistics.fmean(times), 3),
        },
        "target_p99_ms": TARGET_P99_MS,
        "p99_ok": p99 <= TARGET_P99_MS,
        "agent_rss_mb": round(rss, 1),
        "target_rss_mb": TARGET_RSS_MB,
        "rss_ok": rss <= TARGET_RSS_MB,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
