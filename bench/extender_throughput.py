"""kube-scheduler throughput with kubeacc extender vs without, on the testbed.

Prints one JSON object. One testbed: two nodes (``gpu-a``: 2 NVIDIA L4, ``gpu-b``: 1 L4, GPUs
shared by the node agents), the real kube-scheduler configured with the extender, the node
agents and life-cycle agents as processes, the extender as a process. Then ``--pods`` pods
that ask for CPU only (the scheduler never calls the extender: the baseline) and as many that
ask for a 1000 MiB share (filter, prioritize and bind go through the extender) are created as
fast as one client can, and the time from the first create to the last pod bound is taken:
pods/s for each. Each batch is deleted before the next.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.contracts.wants import MEMORY
from kubeacc.crds.resources import Accelerator, as_dict, install_crds
from kubeacc.extender.schedconfig import SchedulerTLS, scheduler_entry
from kubeacc.synthetic import profiles
from kubeacc.testbed.extendertls import issue_extender_pki
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed

NODES = {"gpu-a": "l4-pair", "gpu-b": "edge-mixed"}
NS = "throughput"
KUBEACC = str(Path(sys.executable).parent / "kubeacc")


def _wait(what: str, probe: Any, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [KUBEACC, *args],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _pod(name: str, limits: dict[str, str]) -> Any:
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": limits},
                    }
                ],
            },
        }
    )


def _batch(client: Client, prefix: str, limits: dict[str, str], count: int) -> float:
    """Seconds from the first create to the last of ``count`` pods bound."""
    t0 = time.monotonic()
    for i in range(count):
        client.create(_pod(f"{prefix}-{i}", limits))
    _wait(
        f"{count} {prefix} pods bound",
        lambda: (
            sum(bool(as_dict(p)["spec"].get("nodeName")) for p in client.list(Pod, namespace=NS))
            >= count
        ),
    )
    took = time.monotonic() - t0
    for p in client.list(Pod, namespace=NS):
        client.delete(Pod, as_dict(p)["metadata"]["name"], namespace=NS, grace_period=0)
    _wait("pods gone", lambda: not list(client.list(Pod, namespace=NS)))
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=40)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kacc-tp-"))
    port, probe_port = free_port(), free_port()
    # mutual TLS, as the chart runs the extender
    pki = issue_extender_pki(work / "pki")
    tls = SchedulerTLS(pki.client.cert, pki.client.key, pki.ca)
    extenders = [scheduler_entry(f"https://127.0.0.1:{port}", [MEMORY], tls=tls)]
    procs: list[subprocess.Popen[bytes]] = []
    tb = Testbed.start(
        work / "tb",
        nodes=[KubeletOptions(node_name=n, max_pods=250) for n in NODES],
        scheduler_extenders=extenders,
    )
    try:
        client = tb.client(field_manager="kubeacc-bench")
        install_crds(client)
        config = work / "dp.yaml"
        config.write_text("types:\n  gpu: {shared: true}\n")
        kc = str(tb.kubeconfig)
        for node, profile in NODES.items():
            host = profiles.build(profile, work / node / "host", seed=node)
            common = [f"--node-name={node}", f"--host-root={host}", f"--kubeconfig={kc}"]
            procs.append(
                _spawn(
                    [
                        "agent",
                        *common,
                        f"--kubelet-root={tb.node(node).root_dir}",
                        f"--cdi-dir={work / node / 'cdi'}",
                        f"--state-dir={work / node / 'state'}",
                        f"--device-plugin-config={config}",
                    ],
                    work / node / "agent.log",
                )
            )
            procs.append(
                _spawn(
                    ["lifecycle-agent", *common, f"--bitstream-dir={work / node}"],
                    work / node / "lifecycle.log",
                )
            )
        _wait(
            "shared GPUs in allocatable",
            lambda: all(
                ((client.get(Node, n).status.allocatable or {}).get("kubeacc.io/gpu-memory"))  # type: ignore[union-attr]
                for n in NODES
            ),
        )
        _wait("Accelerators", lambda: len(list(client.list(Accelerator))) >= 3)
        procs.append(
            _spawn(
                [
                    "extender",
                    f"--kubeconfig={kc}",
                    f"--address=127.0.0.1:{port}",
                    f"--probe-address=127.0.0.1:{probe_port}",
                    f"--tls-cert-file={pki.server.cert}",
                    f"--tls-key-file={pki.server.key}",
                    f"--client-ca-file={pki.ca}",
                ],
                work / "extender.log",
            )
        )

        def ready() -> bool:
            url = f"http://127.0.0.1:{probe_port}/readyz"
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        _wait("extender ready", ready)
        client.create(
            from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        )
        tb.wait_service_account(NS)
        n = args.pods
        _batch(client, "warm", {"cpu": "10m"}, 5)  # first pods pay for caches
        plain = _batch(client, "plain", {"cpu": "10m"}, n)
        shared = _batch(client, "share", {"kubeacc.io/gpu-memory": "1000"}, n)
        print(
            json.dumps(
                {
                    "benchmark": "scheduler_throughput_with_extender",
                    "pods": n,
                    "without_extender_pods_per_s": round(n / plain, 2),
                    "with_extender_pods_per_s": round(n / shared, 2),
                    "without_extender_s": round(plain, 2),
                    "with_extender_s": round(shared, 2),
                },
                indent=2,
            )
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        tb.stop()


if __name__ == "__main__":
    main()
