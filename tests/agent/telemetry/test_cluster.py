"""Device telemetry on the testbed: the real kubelet's pods appear as labels on their GPU's
series -- a DRA claim's pod (agent serving GPUs through DRA), then a device-plugin pod (the
agent serving GPUs through the kubelet device plugin), each scraped from the agent's /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import free_port
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.dra.test_e2e import claim_obj, gone, one_gpu, running
from tests.metrics.scrape import get, samples
from tests.nodestack import claim_pod, resource_pod
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

UTIL = "kubeacc_device_utilization_ratio"


def _held(port: int, pod: str) -> list[dict[str, str]]:
    """The label sets of the compute-utilisation series that name ``pod``."""
    return [
        dict(labels)
        for (name, labels), _ in samples(port).items()
        if name == UTIL and ("pod", pod) in labels and ("engine", "compute") in labels
    ]


def _agent(testbed: Testbed, tmp_path: Path, extra: list[str]) -> tuple[AgentProcess, int]:
    host = profiles.build("dgx-h100", tmp_path / "host")
    port = free_port()
    agent = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    agent.start(extra=[f"--metrics-address=127.0.0.1:{port}", "--telemetry-interval=1", *extra])
    agent.wait_registered()
    eventually(lambda: get(port, "/metrics")[0] == 200, 60, "the metrics port")
    return agent, port


def test_dra_claim_pod_labels_its_gpu(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    agent, port = _agent(testbed, tmp_path, [])
    try:
        kube_client.create(claim_obj("gpu", namespace, one_gpu()))
        kube_client.create(claim_pod("trainer", namespace, "gpu"))
        eventually(lambda: running(kube_client, "trainer", namespace), 90, "pod Running")
        [labels] = eventually(lambda: _held(port, "trainer"), 30, "the pod on a GPU series")
        assert labels["namespace"] == namespace
        assert labels["claim"] == "gpu"
        assert labels["node"] == testbed.node_name
        assert labels["device"].startswith("gpu-")
        assert labels["model"] == "NVIDIA H100 80GB HBM3"
        # the other GPUs' series carry no holder
        idle = [
            dict(ls)
            for (n, ls), _ in samples(port).items()
            if n == UTIL and ("engine", "compute") in ls and ("pod", "") in ls
        ]
        assert len(idle) == 7  # 8 GPUs, one held
        kube_client.delete(Pod, "trainer", namespace=namespace)
        eventually(lambda: gone(kube_client, "trainer", namespace), 90, "pod deleted")
        eventually(lambda: not _held(port, "trainer"), 30, "the holder gone from the series")
    finally:
        agent.stop()


def test_device_plugin_pod_labels_its_gpu(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    agent, port = _agent(
        testbed,
        tmp_path,
        ["--device-plugin-type=gpu", f"--device-plugin-dir={testbed.kubelet.device_plugin_dir}"],
    )
    try:

        def gpus_allocatable() -> bool:
            status = kube_client.get(Node, testbed.node_name).status
            return bool(status and (status.allocatable or {}).get("kubeacc.io/gpu") == "8")

        eventually(gpus_allocatable, 60, "kubeacc.io/gpu from the agent's device plugin")
        kube_client.create(resource_pod("server", namespace, {"kubeacc.io/gpu": "1"}))
        eventually(lambda: running(kube_client, "server", namespace), 90, "pod Running")
        [labels] = eventually(lambda: _held(port, "server"), 30, "the pod on a GPU series")
        assert (labels["namespace"], labels["container"], labels["claim"]) == (
            namespace,
            "main",
            "",
        )
        assert labels["device"].startswith("gpu-")
        kube_client.delete(Pod, "server", namespace=namespace)
        eventually(lambda: gone(kube_client, "server", namespace), 90, "pod deleted")
    finally:
        agent.stop()
