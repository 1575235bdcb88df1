"""HAMi's scheduler extender over the testbed's API server: filter latency at N nodes.

The peer of ``bench/extender.py`` (``--peer hami`` runs both, alternating). HAMi's extender
(kubeacc/testbed/hami.py) reads its nodes and pods from a real kube-apiserver: the N nodes are
created there, each with 8 H100 80GB (``nvidia.com/gpu: 8`` allocatable and the device
plugin's registration annotation HAMi reads, as its device plugin writes them), and the pods
it is asked about exist there, because its filter writes its choice on the pod. It answers
filter only (the chosen node; no prioritize), so its figures are one filter call, the body the
scheduler sends with node names only. ``p50_ms``/``p99_ms``: request sent to answer read;
``cpu_ms_per_call``: HAMi's CPU (from /proc, clock ticks) over all rounds / rounds. Its nodes
hold nothing, kube-acc's carry the benchmark's held GPUs: HAMi's answers are the easier ones.
HAMi runs with ``--kube-qps 1000``: with its default (client-go's 5 requests/s) each filter
after the first few waits ~400 ms for its pod patch and event (measured at 50 nodes).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod

from kubeacc.testbed import Testbed
from kubeacc.testbed.hami import ensure_built
from kubeacc.testbed.procs import cpu_seconds

NS = "bench-hami"
MIB = 81559  # an H100 80GB HBM3's memory as NVML reports it
#: HAMi's device configuration: the NVIDIA section of its chart's defaults.
DEVICE_CONFIG = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
"""
#: The pods of bench/extender.py that HAMi's resources can ask for.
PODS = {
    "share_8gib": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"},
    "share_8gib_30pct": {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "8192",
        "nvidia.com/gpucores": "30",
    },
    "whole_1": {"nvidia.com/gpu": "1"},
    "whole_4": {"nvidia.com/gpu": "4"},
}


def _node(i: int, stamp: str) -> Any:
    devices = [
        {
            "id": f"GPU-{i:05d}-{g}",
            "index": g,
            "count": 10,
            "devmem": MIB,
            "devcore": 100,
            "type": "NVIDIA-NVIDIA H100 80GB HBM3",
            "numa": g // 4,
            "mode": "hami-core",
            "health": True,
        }
        for g in range(8)
    ]
    room = {"cpu": "64", "memory": "512Gi", "pods": "250", "nvidia.com/gpu": "8"}
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"node-{i:05d}",
                "annotations": {
                    "hami.io/node-nvidia-register": json.dumps(devices),
                    "hami.io/node-handshake": f"Requesting_{stamp}",
                },
            },
            "status": {"capacity": room, "allocatable": room},
        }
    )


def populate(client: Client, nodes: int) -> float:
    """Create the nodes (their status in the create, as a kubelet registers); seconds."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")  # Go's time.DateTime, local time
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.create(_node(i, stamp)), range(nodes)))
    return time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Hami:
    """HAMi's extender process against the testbed's API server."""

    def __init__(self, tb: Testbed, workdir: Path) -> None:
        config = workdir / "device-config.yaml"
        config.write_text(DEVICE_CONFIG)
        self.port = _free_port()
        self.log = (workdir / "hami.log").open("wb")
        env = {**os.environ, "KUBECONFIG": str(tb.kubeconfig), "POD_NAMESPACE": NS}
        self.proc = subprocess.Popen(
            [
                str(ensure_built()),
                f"--http_bind=127.0.0.1:{self.port}",
                f"--metrics-bind-address=127.0.0.1:{_free_port()}",
                f"--device-config-file={config}",
                "--leader-elect=false",
                # client-go's default 5 requests/s (HAMi's default) would make every filter
                # wait ~0.4 s for its pod patch and event: the figures are HAMi's own work
                "--kube-qps=1000",
                "--kube-burst=2000",
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _pods(client: Client) -> dict[str, dict[str, Any]]:
    client.create(Namespace(metadata=ObjectMeta(name=NS)))
    out = {}
    for label, limits in PODS.items():
        name = label.replace("_", "-")
        client.create(
            from_dict(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.example/infer:1.0",
                                "resources": {"limits": {"cpu": "4", **limits}},
                            }
                        ]
                    },
                }
            )
        )
        out[label] = client.get(Pod, name, namespace=NS).to_dict()
    return out


def _filter(conn: http.client.HTTPConnection, body: bytes) -> dict[str, Any]:
    conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"HAMi's filter answered {resp.status}: {data[:300]!r}")
    answer: dict[str, Any] = msgspec.json.decode(data)
    return answer


class HamiPeer:
    """A testbed with ``nodes`` nodes and HAMi's extender watching it (a context manager)."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.names = [f"node-{i:05d}" for i in range(nodes)]

    def __enter__(self) -> HamiPeer:
        self.tb = Testbed.start(with_kubelet=False)
        try:
            client = self.tb.client()
            self.populate_s = populate(client, self.nodes)
            self.pods = _pods(client)
            self.workdir = Path(tempfile.mkdtemp(prefix="kubeacc-hami-"))
            self.hami = Hami(self.tb, self.workdir)
            self._wait_ready()
        except BaseException:
            self.tb.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.hami.stop()
        self.tb.stop()

    def _wait_ready(self, timeout: float = 1200) -> None:
        """Until HAMi has registered every node's GPUs: a 4-GPU pod is placed, and no node
        is refused (HAMi refuses the nodes it has not registered yet)."""
        body = msgspec.json.encode(
            {"Pod": self.pods["whole_4"], "NodeNames": self.names, "Nodes": None}
        )
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.hami.proc.poll() is not None:
                raise RuntimeError(f"HAMi's extender exited; see {self.workdir / 'hami.log'}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.hami.port, timeout=60)
                last = _filter(conn, body)
                conn.close()
                if last.get("NodeNames") and not last.get("FailedNodes"):
                    return
                last = f"{len(last.get('FailedNodes') or {})} nodes refused"
            except (OSError, RuntimeError) as err:
                last = err
            time.sleep(1)
        raise RuntimeError(f"HAMi placed nothing in {timeout} s: {last}")

    def measure(self, rounds: int) -> dict[str, Any]:
        pid = self.hami.proc.pid
        conn = http.client.HTTPConnection("127.0.0.1", self.hami.port, timeout=60)
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out: dict[str, Any] = {}
        try:
            for label, pod in self.pods.items():
                body = msgspec.json.encode({"Pod": pod, "NodeNames": self.names, "Nodes": None})
                times: list[float] = []
                chosen: list[str] = []
                for r in range(rounds + 3):
                    if r == 3:
                        cpu0 = cpu_seconds(pid)
                    t0 = time.perf_counter()
                    answer = _filter(conn, body)
                    t1 = time.perf_counter()
                    chosen = answer.get("NodeNames") or []
                    if r >= 3:
                        times.append((t1 - t0) * 1000)
                cpu = cpu_seconds(pid) - cpu0
                ordered = sorted(times)
                out[label] = {
                    "p50_ms": round(ordered[len(ordered) // 2], 3),
                    "p99_ms": round(
                        ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 3
                    ),
                    "cpu_ms_per_call": round(cpu * 1000 / rounds, 2),
                    "nodes_chosen": len(chosen),
                }
        finally:
            conn.close()
        return out
