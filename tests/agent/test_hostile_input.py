"""Hostile input on the agent's real sockets (DRA and device plugin) and in its host root.

``kubeacc agent`` runs as a subprocess against the testbed's API server, serving GPUs through
the device-plugin API and everything else through DRA; the tests call it through grpcio as the
kubelet does, or through a bare HTTP/2 client for what no gRPC library sends.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from kubeacc.node.kubeletapi import dra_v1_pb2 as dra
from kubeacc.node.rpc import MAX_RECEIVE, MAX_STREAMS
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.h2probe import declare_message
from tests.kubeletclient import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from tests.kubeletclient import dra_v1_pb2_grpc as dra_grpc
from tests.kubeletclient.refusal import refusal
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

DRA_PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
DP_ALLOCATE = "/v1beta1.DevicePlugin/Allocate"
BIG = 64 << 20


@dataclass
class RunningAgent:
    proc: AgentProcess
    host: Path
    dra_socket: Path
    dp_socket: Path

    def rss_mb(self) -> float:
        assert self.proc.proc is not None
        status = Path(f"/proc/{self.proc.proc.pid}/status").read_text()
        line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024


@pytest.fixture
def agent(testbed: Testbed, kube_client: Client) -> Iterator[RunningAgent]:
    node = f"hostile-{uuid.uuid4().hex[:6]}"
    kube_client.create(Node(metadata=ObjectMeta(name=node)))
    with tempfile.TemporaryDirectory(prefix="hostile-", dir="/tmp") as tmp:  # sun_path
        work = Path(tmp)
        host = profiles.build("dgx-h100", work / "host")
        proc = AgentProcess(node, host, testbed.kubeconfig, work / "kubelet", work)
        proc.start(extra=["--device-plugin-type=gpu", f"--device-plugin-dir={work / 'dp'}"])
        running = RunningAgent(
            proc,
            host,
            work / "kubelet/plugins/kubeacc.io/dra.sock",
            work / "dp/kubeacc-gpu.sock",
        )
        try:
            eventually(
                lambda: running.dra_socket.exists() and running.dp_socket.exists(),
                60,
                f"the agent's sockets:\n{proc.log()[-2000:]}",
            )
            yield running
        finally:
            proc.stop()


def test_oversized_messages_are_refused_on_both_sockets_and_memory_stays(
    agent: RunningAgent,
) -> None:
    huge_claim = dra.NodePrepareResourcesRequest(
        claims=[dra.Claim(namespace="ns", name="n" * BIG, uid="u")]
    )
    huge_alloc = dp.AllocateRequest(
        container_requests=[dp.ContainerAllocateRequest(devices_ids=["x" * BIG])]
    )
    with (
        grpc.insecure_channel(f"unix://{agent.dra_socket}") as dra_ch,
        grpc.insecure_channel(f"unix://{agent.dp_socket}") as dp_ch,
    ):
        plugin = dra_grpc.DRAPluginStub(dra_ch)
        devices = dp_grpc.DevicePluginStub(dp_ch)
        plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(), timeout=30)
        devices.GetDevicePluginOptions(dp.Empty(), timeout=30)
        time.sleep(2)
        before = agent.rss_mb()
        for _ in range(3):
            for err in (
                refusal(plugin.NodePrepareResources, huge_claim),
                refusal(devices.Allocate, huge_alloc),
            ):
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
                assert f"vs. {MAX_RECEIVE})" in (err.details() or "")
        # A length no gRPC client would send: refused from the 5-byte prefix alone.
        for sock, method in ((agent.dra_socket, DRA_PREPARE), (agent.dp_socket, DP_ALLOCATE)):
            probe = declare_message(sock, method, 512 << 20)
            assert probe.trailers.get("grpc-status") == "8", probe
            assert "536870912 vs. 4194304" in probe.trailers.get("grpc-message", "")
            assert probe.settings.get(3) == MAX_STREAMS  # SETTINGS_MAX_CONCURRENT_STREAMS
        time.sleep(2)
        grown = agent.rss_mb() - before
        assert grown < 16, f"RSS grew by {grown:.1f} MB over 6 x 64 MiB and 2 x 512 MiB requests"
        # Still serving, on the same connections.
        assert plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(), timeout=30)
        assert devices.GetDevicePluginOptions(dp.Empty(), timeout=30)


def test_a_fifo_appearing_in_sysfs_at_run_time_does_not_stall_the_agent(
    agent: RunningAgent,
) -> None:
    gpu = "0000:1b:00.0"
    numa = Path(os.path.realpath(agent.host / "sys/bus/pci/devices" / gpu)) / "numa_node"
    with grpc.insecure_channel(f"unix://{agent.dp_socket}") as ch:
        stream = dp_grpc.DevicePluginStub(ch).ListAndWatch(dp.Empty(), timeout=120)
        first = {d.ID: d for d in next(stream).devices}
        assert first[gpu].topology.nodes, "the GPU starts with its NUMA node"
        numa.unlink()
        os.mkfifo(numa)  # nobody ever writes: a blocking open() would hang forever
        second = {d.ID: d for d in next(stream).devices}
        assert not second[gpu].topology.nodes, "the next discovery pass read past the FIFO"
        assert sorted(second) == sorted(first)
        stream.cancel()
    assert agent.proc.proc is not None and agent.proc.proc.poll() is None
    started = time.monotonic()
    agent.proc.proc.terminate()
    agent.proc.proc.wait(30)
    assert time.monotonic() - started < 10
