"""FPGAs programmed at prepare where the cluster has no binding conditions: the testbed's control
plane runs with DRADeviceBindingConditions off, so the API server drops ``bindingConditions``
from ResourceSlices and kube-scheduler binds at once.

The agent sees so before it publishes (a dry-run probe), says so in its log, publishes its FPGA
without binding conditions, and loads the claim's bitstream in NodePrepareResources, as before
binding conditions: the pod runs with the bitstream in, the claim has no binding condition and
no binding outcome is counted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.agent.dra.fpga.conditions import PROGRAMMED
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.crds.resources import as_dict, install_crds
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.hosts_fpga import PAC_ARRIA10
from kubeacc.testbed.identities import agent_kubeconfig
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.versions import FEATURE_GATES
from tests.metrics.scrape import value
from tests.nodestack import claim_pod, install, pod_phase, resource_claim
from tests.testbed.helpers import eventually

from .agentproc import AgentProcess
from .test_binding_cluster import AFU, _card, _host, allow_arria, start_binding_agent

pytestmark = pytest.mark.cluster

NODE = "fpga-late"
NS = "late-binding"


def test_without_the_gate_the_bitstream_is_loaded_at_prepare(tmp_path: Path) -> None:
    gates = {**FEATURE_GATES, "DRADeviceBindingConditions": False}
    tb = Testbed.start(nodes=[KubeletOptions(node_name=NODE)], feature_gates=gates)
    agent: AgentProcess | None = None
    try:
        client = tb.client(field_manager="kubeacc-test")
        install_crds(tb.client(field_manager="kubeacc-test-crds"))
        install(tb)
        gbs = make_gbs(AFU, PAC_ARRIA10.compat_id, b"arria" * 200, name="arria")
        digest = hashlib.sha256(gbs).hexdigest()
        host = _host(tmp_path / "host", NODE, PAC_ARRIA10)
        library = tmp_path / "bitstreams"
        library.mkdir()
        (library / "arria.gbs").write_bytes(gbs)
        allow_arria(client, _card(host).model, digest, NS)
        tb.wait_service_account(NS)

        agent = AgentProcess(
            NODE, host, agent_kubeconfig(tb, NODE, tmp_path), tb.node(NODE).root_dir, tmp_path
        )
        port = start_binding_agent(agent, library)
        agent.wait_log("the API server drops bindingConditions")
        fpga = _card(host).name

        def published() -> dict[str, dict[str, object]] | None:
            found = {
                d["name"]: d
                for s in client.list(ResourceSlice, fields={"spec.driver": DRIVER_NAME})
                for d in as_dict(s)["spec"].get("devices") or []
            }
            return found if fpga in found else None

        # the gate's log line comes before the slices are published: wait for them
        devices = eventually(published, 60, "the FPGA published")
        assert "bindingConditions" not in devices[fpga]

        config = [fpga_claim_config("arria.gbs", f"sha256:{digest}")]
        requests = [{"name": "fpga", "exactly": {"deviceClassName": "fpga.kubeacc.io"}}]
        client.create(resource_claim("fpga", NS, requests, config))
        client.create(claim_pod("app", NS, "fpga"))
        eventually(lambda: pod_phase(client, "app", NS) == "Running", 180, "the pod Running")

        card = _card(host)
        assert card.fpga and card.fpga.afu_id == AFU, "the bitstream was not loaded"
        log = agent.log()
        assert f"programmed {fpga} with arria.gbs" in log, "not loaded at prepare"
        assert "carries AFU" not in log  # nothing loaded before binding to verify
        status = as_dict(client.get(ResourceClaim, "fpga", namespace=NS))["status"]
        (result,) = status["allocation"]["devices"]["results"]
        assert result["device"] == fpga and "bindingConditions" not in result
        entries = status.get("devices") or []
        conditions = [c["type"] for d in entries for c in d.get("conditions") or []]
        assert PROGRAMMED not in conditions
        assert value(port, "kubeacc_agent_fpga_bindings_total") == 0
    finally:
        if agent is not None:
            agent.stop()
        tb.stop()
