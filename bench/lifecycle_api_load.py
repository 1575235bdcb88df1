"""API server load of idle life-cycle agents, and operation latency; prints JSON.

Starts the testbed control plane (no kubelet), one Node object per fake node, N life-cycle
agents as in-process threads (each its own synthetic ``edge-mixed`` host, synthetic kernel and
client) and one controller. After the agents have published their Accelerators, it counts every
HTTP request the agents and the controller send during ``--idle`` seconds of nothing happening
(httpx2 logs one line per request; the line's thread tells whose it is). Then it creates
``--ops`` Reset operations one after the other and measures each from create to ``Succeeded``.

Runs against whichever ``kubeacc`` is importable, so the same script measures the polling code
(the main branch's venv) and the watch-driven one.

    python bench/lifecycle_api_load.py [--agents 20] [--idle 30] [--ops 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from apiload import RequestCounter, by_verb, total  # bench/, the script's directory
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node

from kubeacc.controller.controller import Controller
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict, install_crds
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from kubeacc.testbed import Testbed

NS = "bench"
TARGET_DEVICE = "gpu-0000-01-00-0"  # on every edge-mixed host


def _component(thread: str) -> str:
    if thread.startswith("controller"):
        return "controller"
    if thread.startswith(("agent-", "accop-watch-")):
        return "agents"
    return "other"


def _node(client: Client, name: str) -> None:
    client.create(Node(metadata=ObjectMeta(name=name)))


def _accelerators_ready(client: Client, nodes: list[str]) -> bool:
    have = {
        (a.get("spec") or {}).get("node")
        for a in (as_dict(x) for x in client.list(Accelerator))
        if (a.get("status") or {}).get("device")
    }
    return all(n in have for n in nodes)


def _run_op(client: Client, name: str, target: str, timeout: float = 60) -> float:
    t0 = time.monotonic()
    client.create(
        AcceleratorOperation(
            {"apiVersion": API_VERSION, "kind": "AcceleratorOperation"},
            metadata={"name": name, "namespace": NS},
            spec={"action": "Reset", "targets": [target]},
        ),
        namespace=NS,
    )
    while time.monotonic() - t0 < timeout:
        op = as_dict(client.get(AcceleratorOperation, name, namespace=NS))
        phase = (op.get("status") or {}).get("phase")
        if phase == "Succeeded":
            return time.monotonic() - t0
        if phase == "Failed":
            raise RuntimeError(f"{name} failed: {op['status']}")
        time.sleep(0.01)
    raise TimeoutError(f"{name} not done after {timeout}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--idle", type=float, default=30.0)
    ap.add_argument("--ops", type=int, default=10)
    args = ap.parse_args()

    counter = RequestCounter(_component).install()

    work = Path(tempfile.mkdtemp(prefix="kubeacc-bench-"))
    tb = Testbed.start(with_kubelet=False)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        admin = tb.client(field_manager="kubeacc-bench")
        install_crds(admin)
        admin.create(Namespace(metadata=ObjectMeta(name=NS)))
        nodes = [f"bench-{i:03d}" for i in range(args.agents)]
        for i, node in enumerate(nodes):
            _node(admin, node)
            root = build("edge-mixed", work / node / "host")
            (work / node / "lib").mkdir()
            agent = LifecycleAgent(
                tb.client(field_manager=f"kubeacc-agent-{node}"),
                node_name=node,
                host=SyntheticHost(root, kernel=SyntheticKernel(root)),
                bitstream_dir=work / node / "lib",
                interval=1.0,
            )
            threads.append(
                threading.Thread(target=agent.run, args=(stop,), name=f"agent-{i}", daemon=True)
            )
        ctl = Controller(
            tb.client(field_manager="kubeacc-controller"),
            identity="bench",
            lease_namespace="default",
            lease_name="kubeacc-bench",
            admin_namespaces=(NS,),  # the operations' namespace may act on any device
        )
        threads.append(
            threading.Thread(target=ctl.run, args=(stop,), name="controller", daemon=True)
        )
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while not _accelerators_ready(admin, nodes):
            if time.monotonic() > deadline:
                raise TimeoutError("agents did not publish their Accelerators")
            time.sleep(0.5)
        time.sleep(5)  # let start-up writes settle

        counter.take()
        t0 = time.monotonic()
        time.sleep(args.idle)
        idle = time.monotonic() - t0
        counts = counter.take()

        latencies = []
        for i in range(args.ops):
            node = nodes[i % len(nodes)]
            latencies.append(_run_op(admin, f"reset-{i}", f"{node}-{TARGET_DEVICE}"))
        counter.take()

        def rate(component: str) -> float:
            return total(counts, component) / idle

        result: dict[str, Any] = {
            "benchmark": "lifecycle_api_load",
            "agents": args.agents,
            "idle_s": round(idle, 1),
            "agents_requests_per_s": round(rate("agents"), 2),
            "per_agent_requests_per_s": round(rate("agents") / args.agents, 3),
            "controller_requests_per_s": round(rate("controller"), 2),
            "idle_requests_by_verb": {
                f"{c}:{v}": n
                for c in ("agents", "controller")
                for v, n in by_verb(counts, c).items()
            },
            "op_create_to_succeeded_ms": {
                "n": len(latencies),
                "p50": round(statistics.median(latencies) * 1000, 1),
                "min": round(min(latencies) * 1000, 1),
                "max": round(max(latencies) * 1000, 1),
            },
        }
        print(json.dumps(result, indent=2))
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        tb.stop()


if __name__ == "__main__":
    main()
