"""kube-acc on an API server with the DRA gates off, as Kubernetes 1.34/1.35 ship them.

DRADeviceTaints, DRAPartitionableDevices and DRAConsumableCapacity off: the API server drops
``taints``, ``sharedCounters``/``consumesCounters`` and ``allowMultipleAllocations`` from
ResourceSlices without an error. The agent finds out before it publishes (a dry-run create,
kubeacc/agent/dra/features.py), says so once (log and an Event on its Node) and publishes only
what the cluster enforces: the memory-shared GPU whole, so two claims never get it at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Namespace, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.dra.features import SliceFeatures, probe, probe_binding
from kubeacc.agent.dra.slices import SlicePublisher
from kubeacc.crds.resources import as_dict
from kubeacc.synthetic import profiles
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.versions import FEATURE_GATES

from ...nodestack import claim, claim_pod
from ...testbed.helpers import eventually
from .agentproc import AgentProcess
from .test_sharing_e2e import running

pytestmark = pytest.mark.cluster

NODE = "old-a"
SHARED_BDF = "0000:1b:00.0"
SHARED = "gpu-0000-1b-00-0"
OFF = ("DRAConsumableCapacity", "DRADeviceTaints", "DRAPartitionableDevices")
#: Off with them: DRADeviceTaintRules depends on DRADeviceTaints, and 1.37's API server (where it
#: is GA, on by default) refuses to start with it on and DRADeviceTaints off; 1.36 has it off.
OFF_TOO = ("DRADeviceTaintRules",)
NS = "gates-off"


@pytest.fixture(scope="module")
def old_cluster() -> Iterator[Testbed]:
    gates = {**FEATURE_GATES, **dict.fromkeys((*OFF, *OFF_TOO), False)}
    tb = Testbed.start(nodes=[KubeletOptions(node_name=NODE)], feature_gates=gates)
    try:
        yield tb
    finally:
        tb.stop()


def test_the_probe_sees_the_gates_on(testbed: Testbed) -> None:
    client = testbed.client(field_manager="kubeacc-test")
    assert probe(client, testbed.node_name) == SliceFeatures()


def test_kube_acc_refuses_what_the_cluster_cannot_enforce(
    old_cluster: Testbed, tmp_path: Path
) -> None:
    tb = old_cluster
    client: Client = tb.client(field_manager="kubeacc-test")
    assert probe(client, NODE) == SliceFeatures(False, False, False)
    assert not list(client.list(ResourceSlice))  # the probes were dry runs

    host = profiles.build("dgx-h100", tmp_path / "host")
    agent = AgentProcess(NODE, host, tb.kubeconfig, tb.node(NODE).root_dir, tmp_path)
    agent.start(extra=[f"--memory-shared=pci={SHARED_BDF}"])
    try:
        agent.wait_registered(90)
        agent.wait_log("memory-shared devices are published whole")
        message = "".join(
            line for line in agent.log().splitlines() if "the API server drops" in line
        )
        for gate in OFF:
            assert gate in message, message

        def event() -> str | None:
            for e in client.list(Event, namespace="default"):
                if e.reason == "DRAFeaturesMissing" and e.involvedObject.name == NODE:
                    return e.message
            return None

        assert "kube-acc publishes no device" in eventually(event, 30, "the Node's Event")
        devices = {
            d["name"]: d
            for s in client.list(ResourceSlice)
            for d in as_dict(s)["spec"].get("devices") or []
        }
        assert SHARED in devices
        for field in ("allowMultipleAllocations", "consumesCounters", "taints"):
            assert not [n for n, d in devices.items() if field in d], field

        # two claims for the shared GPU: one gets it, the other waits (never both)
        client.create(Namespace.from_dict({"metadata": {"name": NS}}))
        tb.wait_service_account(NS)
        selector = f'device.attributes["resource.kubernetes.io"].pciBusID == "{SHARED_BDF}"'
        for name in ("first", "second"):
            client.create(claim(name, NS, "gpu.kubeacc.io", selector))
            client.create(claim_pod(name, NS, name))
        eventually(
            lambda: running(client, "first", NS) or running(client, "second", NS), 90, "one runs"
        )
        time.sleep(10)
        assert [running(client, n, NS) for n in ("first", "second")].count(True) == 1
        pods = [as_dict(p) for p in client.list(Pod, namespace=NS)]
        assert sum(bool(p["spec"].get("nodeName")) for p in pods) == 1
    finally:
        agent.stop()


def test_what_the_api_server_could_not_answer_is_asked_again(testbed: Testbed) -> None:
    """An agent started during an API server outage (issue 46's fault runner): the probes it
    could not make are made again before the next publish, so the node does not keep publishing
    FPGAs without their binding conditions until the agent restarts."""
    client = testbed.client(field_manager="kubeacc-test")
    publisher = SlicePublisher(client, testbed.node_name)
    fpga = {"name": "fpga-0", "bindingConditions": ["c"], "bindingFailureConditions": ["f"]}
    testbed.stop_apiserver()
    try:
        away = probe(client, testbed.node_name)
        assert away == SliceFeatures(unsure=True)
        assert probe_binding(client, testbed.node_name) is None
        devices, _ = publisher._enforceable([fpga], [])
        assert devices == [{"name": "fpga-0"}]  # without, while nobody can tell
    finally:
        testbed.start_apiserver()
    devices, _ = publisher._enforceable([fpga], [])
    assert devices == [fpga]
    assert publisher.features == SliceFeatures(binding=True)
