"""The API server goes away and comes back: the node agent keeps serving the kubelet, retries,
and catches up. A real outage: the testbed's kube-apiserver process is stopped and restarted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import grpc
import httpx2
import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.agent.dra.devices import UNHEALTHY_TAINT
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from tests.kubeletclient import dra_v1_pb2_grpc as v1_grpc

from ...testbed.helpers import eventually
from .agentproc import AgentProcess
from .test_e2e import claim_obj, pod_obj, running

pytestmark = pytest.mark.cluster

NS = "outage"
XPU_CLASS = {"exactly": {"deviceClassName": "xpu.kubeacc.io"}}
UNPLUGGED_DRIVER = "sys/bus/pci/devices/0000:3d:00.0/driver"


def _one_xpu() -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "xpu", **XPU_CLASS}]}}


def _prepare(agent: AgentProcess, claims: list[tuple[str, str, str]]) -> Any:
    """NodePrepareResources as the kubelet calls it (10 s deadline)."""
    sock = agent.kubelet_root / "plugins" / DRIVER_NAME / "dra.sock"
    req = v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace=n, name=m, uid=u) for n, m, u in claims]
    )
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        return v1_grpc.DRAPluginStub(ch).NodePrepareResources(req, timeout=10)


def _tainted(client: Client, node: str) -> bool:
    try:
        slices = list(
            client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME})
        )
    except (ApiError, httpx2.HTTPError):
        return False  # the API server is still starting
    devs = {d.name: d for s in slices for d in s.spec.devices}
    taints = getattr(devs.get("xpu-0000-3d-00-0"), "taints", None) or []
    return [t.key for t in taints] == [UNHEALTHY_TAINT]


def test_agent_rides_out_an_api_server_outage(tmp_path: Path) -> None:
    with Testbed.start() as tb:
        client = tb.client()
        client.create(Namespace(metadata=ObjectMeta(name=NS)))
        tb.wait_service_account(NS)
        host = profiles.build("kunlun-xpu", tmp_path / "host")
        agent = AgentProcess(tb.node_name, host, tb.kubeconfig, tb.kubelet.root_dir, tmp_path)
        agent.start()
        try:
            agent.wait_registered()
            client.create(claim_obj("before", NS, _one_xpu()))
            client.create(pod_obj("before", NS, "before"))
            eventually(lambda: running(client, "before", NS), 90, "pod 'before' Running")
            before = client.get(ResourceClaim, "before", namespace=NS).metadata.uid
            assert agent.spec_uids() == {before}

            tb.stop_apiserver()

            # The kubelet asking again for a prepared claim is answered from the checkpoint; a
            # claim the agent cannot read gets a clear per-claim error within the deadline.
            resp = _prepare(agent, [(NS, "before", before), (NS, "unseen", "uid-unseen")])
            assert resp.claims[before].error == ""
            assert len(resp.claims[before].devices) == 1
            unseen = resp.claims["uid-unseen"].error
            assert unseen.startswith("prepare failed:"), unseen
            assert "connect" in unseen.lower(), unseen
            # The host changes meanwhile: an XPU loses its kernel driver (unhealthy).
            os.unlink(host / UNPLUGGED_DRIVER)
            agent.wait_log("publishing failed", timeout=30)
            agent.wait_log("claim watch ended", timeout=30)
            assert agent.proc is not None and agent.proc.poll() is None, agent.log()[-3000:]

            tb.start_apiserver()

            # Caught up: the change made during the outage reaches the slice, the claim watch
            # is back, and a new pod's claim is prepared.
            eventually(lambda: _tainted(client, tb.node_name), 90, "taint published after outage")
            tb.wait_node_ready(timeout=90)
            client.create(claim_obj("after", NS, _one_xpu()))
            client.create(pod_obj("after", NS, "after"))
            eventually(lambda: running(client, "after", NS), 90, "pod 'after' Running")
            after = client.get(ResourceClaim, "after", namespace=NS).metadata.uid
            assert agent.spec_uids() == {before, after}
            assert set(agent.checkpoint_claims()) == {before, after}
            assert agent.proc.poll() is None
        finally:
            agent.stop()
