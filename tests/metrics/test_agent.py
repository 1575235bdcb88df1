"""``kubeacc agent --metrics-address`` on the testbed: /readyz waits for the real kubelet's
registration and the slices, the series move as the kubelet prepares and unprepares a claim, and
the agent has labelled its Node."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import free_port
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.dra.test_e2e import claim_obj, gone, one_gpu, pod_obj, running
from tests.testbed.helpers import eventually

from .scrape import get, value

pytestmark = pytest.mark.cluster
REG_SOCKET = "kubeacc.io-reg.sock"


@pytest.fixture
def unregistered_agent(testbed: Testbed, tmp_path: Path) -> Iterator[tuple[AgentProcess, int]]:
    """An agent whose plugin registry is a directory the kubelet does not watch (yet)."""
    host = profiles.build("dgx-h100", tmp_path / "host")
    port = free_port()
    agent = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, tmp_path / "kubelet", tmp_path
    )
    agent.start(extra=[f"--metrics-address=127.0.0.1:{port}"])
    try:
        eventually(lambda: get(port, "/healthz")[0] == 200, 60, "the metrics port")
        yield agent, port
    finally:
        agent.stop()
        with contextlib.suppress(FileNotFoundError):
            (testbed.kubelet.plugins_registry_dir / REG_SOCKET).unlink()


def test_ready_after_registration_and_series_follow_claims(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    unregistered_agent: tuple[AgentProcess, int],
) -> None:
    agent, port = unregistered_agent
    unregistered = (503, "DRA plugin kubeacc.io not registered with the kubelet\n")
    eventually(lambda: get(port, "/readyz") == unregistered, 60, "slices published")
    assert value(port, "kubeacc_agent_slice_publishes_total") >= 1
    assert get(port, "/healthz") == (200, "ok\n")
    assert value(port, "kubeacc_agent_kubelet_registrations_total") == 0
    assert value(port, "kubeacc_agent_devices", type="gpu", health="Healthy") == 8
    # 7 whole GPUs, GPU 7's 3 fixed MIG instances, 8 NICs (VFs only with --dra-publish vf)
    assert value(port, "kubeacc_agent_published_devices") == 18
    assert value(port, "kubeacc_agent_resource_slices") == 1
    node = kube_client.get(Node, testbed.node_name)
    assert node.metadata and node.metadata.labels
    assert node.metadata.labels["kubeacc.io/gpu.count"] == "8"  # the agent labels its Node

    # Hand the registration socket to the real kubelet: its plugin watcher finds it now.
    (agent.kubelet_root / "plugins_registry" / REG_SOCKET).rename(
        testbed.kubelet.plugins_registry_dir / REG_SOCKET
    )
    agent.wait_registered()
    eventually(lambda: get(port, "/readyz") == (200, "ok\n"), 30, "ready")
    assert value(port, "kubeacc_agent_kubelet_registrations_total", plugin="dra") == 1

    assert value(port, "kubeacc_agent_prepare_seconds_count") == 0
    kube_client.create(claim_obj("gpu", namespace, one_gpu()))
    kube_client.create(pod_obj("app", namespace, "gpu"))
    eventually(lambda: running(kube_client, "app", namespace), 90, "pod Running")
    assert value(port, "kubeacc_agent_prepare_seconds_count") >= 1
    assert value(port, "kubeacc_agent_prepared_claims") == 1
    assert value(port, "kubeacc_agent_prepare_errors_total") == 0
    # Not necessarily 0: once a driver of this name registers, the kubelet retries the
    # unprepares an earlier test's agent left it owing (claims it still has checkpointed).
    unprepared = value(port, "kubeacc_agent_unprepare_seconds_count")

    kube_client.delete(Pod, "app", namespace=namespace)
    eventually(lambda: gone(kube_client, "app", namespace), 90, "pod deleted")
    eventually(lambda: value(port, "kubeacc_agent_prepared_claims") == 0, 30, "unprepared")
    assert value(port, "kubeacc_agent_unprepare_seconds_count") >= unprepared + 1
    assert value(port, "kubeacc_agent_unprepare_errors_total") == 0


def test_bad_metrics_address_is_one_line(testbed: Testbed, tmp_path: Path) -> None:
    agent = AgentProcess(
        testbed.node_name, tmp_path, testbed.kubeconfig, tmp_path / "kubelet", tmp_path
    )
    agent.start(extra=["--metrics-address=9400"])
    assert agent.proc is not None
    assert agent.proc.wait(60) == 2
    assert agent.log().splitlines()[-1] == (
        "error: metrics address '9400' is not HOST:PORT or :PORT"
    )
