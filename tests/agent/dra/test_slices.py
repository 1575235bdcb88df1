"""Slices of a pool: splitting, generation, and publishing to the real API server."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice

from kubeacc.agent.dra.classes import CLASS_NAMES, apply_device_classes, device_classes
from kubeacc.agent.dra.devices import UNHEALTHY_TAINT, slice_devices
from kubeacc.agent.dra.slices import (
    GENERATION_STEP,
    SlicePublisher,
    build_slices,
    chunk_devices,
)
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.model import Health, HealthState, Inventory
from kubeacc.testbed.identities import agent_cert_client, cert_client, install_agent_access
from kubeacc.testbed.testbed import Testbed
from tests.testbed.helpers import eventually_refused


def _fake_devices(n: int) -> list[dict[str, object]]:
    return [{"name": f"dev-{i:04d}", "attributes": {}} for i in range(n)]


def test_split_respects_the_v1_limits() -> None:
    assert [len(c) for c in chunk_devices(_fake_devices(300))] == [128, 128, 44]
    tainted = _fake_devices(100)
    tainted[5]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert [len(c) for c in chunk_devices(tainted)] == [64, 36]
    assert chunk_devices([]) == [[]]


def test_build_slices_carries_pool_count_and_owner() -> None:
    slices = build_slices("n1", "uid-1", _fake_devices(130), generation=7)
    assert [s["metadata"]["name"] for s in slices] == ["n1-kubeacc.io-0", "n1-kubeacc.io-1"]
    for s in slices:
        assert s["spec"]["pool"] == {"name": "n1", "generation": 7, "resourceSliceCount": 2}
        assert s["spec"]["driver"] == DRIVER_NAME
        assert s["spec"]["nodeName"] == "n1"
        assert s["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_device_classes_manifest() -> None:
    docs = device_classes()
    assert tuple(d["metadata"]["name"] for d in docs) == CLASS_NAMES
    gpu = docs[0]["spec"]["selectors"][0]["cel"]["expression"]
    assert gpu == (
        'device.driver == "kubeacc.io" && device.attributes["kubeacc.io"].type == "gpu" && '
        '!has(device.attributes["kubeacc.io"].migProfile)'
    )
    by_name = {d["metadata"]["name"]: d["spec"]["selectors"][0]["cel"]["expression"] for d in docs}
    assert by_name["mig.kubeacc.io"].endswith('&& has(device.attributes["kubeacc.io"].migProfile)')
    assert by_name["accelerator.kubeacc.io"].endswith(
        '&& !has(device.attributes["kubeacc.io"].migProfile)'
    )
    # the device plugin's generic names, so limits of kubeacc.io/<type> work on DRA nodes;
    # partitions and "any device" have no device-plugin counterpart
    extended = {d["metadata"]["name"]: d["spec"].get("extendedResourceName") for d in docs}
    assert extended == {
        "gpu.kubeacc.io": "kubeacc.io/gpu",
        "mig.kubeacc.io": None,
        "fpga.kubeacc.io": "kubeacc.io/fpga",
        "nic.kubeacc.io": "kubeacc.io/nic",
        "xpu.kubeacc.io": "kubeacc.io/xpu",
        "accelerator.kubeacc.io": None,
    }


def _slices(client: Client, node: str) -> list[ResourceSlice]:
    return list(client.list(ResourceSlice, fields={"spec.nodeName": node}))


@pytest.fixture
def agent(testbed: Testbed, kube_client: Client, api_node: str, tmp_path: Path) -> Client:
    """``api_node``'s agent, confined by deploy/admission like a deployed one."""
    install_agent_access(kube_client)
    client = agent_cert_client(testbed, api_node, tmp_path)
    # The policy is loaded a moment after it is created or changed.
    eventually_refused(lambda: client.create(_foreign_slice(api_node), dry_run=True))
    return client


def _foreign_slice(node: str) -> ResourceSlice:
    (obj,) = build_slices(node, None, [], 1)
    obj["spec"]["pool"]["name"] = f"{node}-other"
    return cast(ResourceSlice, ResourceSlice.from_dict(obj))


@pytest.mark.cluster
def test_publish_update_split_and_stale_deletion(
    kube_client: Client, agent: Client, api_node: str, dgx: Inventory
) -> None:
    # Every write below is the agent's own, through the admission policy.
    pub = SlicePublisher(agent, api_node)
    devices = slice_devices(dgx)
    assert pub.publish(devices)
    (s,) = _slices(kube_client, api_node)
    assert s.spec.pool.name == api_node
    assert s.spec.pool.generation == 1
    assert len(s.spec.devices) == len(devices)
    assert s.metadata.ownerReferences[0].kind == "Node"
    assert s.metadata.managedFields[0].manager == "kubeacc-agent"
    # nothing changed: nothing written
    assert not pub.publish(devices)

    # health change: taint and a new generation
    dgx.devices[0].health = Health(state=HealthState.UNHEALTHY, reason="fell off the bus")
    assert pub.publish(slice_devices(dgx))
    slices = _slices(kube_client, api_node)
    # a slice with tainted devices may hold only 64: the 83 devices now need two slices
    assert len(slices) == 2
    assert {x.spec.pool.generation for x in slices} == {2}
    bad = next(d for x in slices for d in x.spec.devices if d.name == dgx.devices[0].name)
    assert bad.taints[0].key == UNHEALTHY_TAINT
    assert bad.taints[0].effect == "NoSchedule"

    # a small per-slice limit splits the pool; then shrinking deletes the stale slices
    pub.max_per_slice = 30
    assert pub.publish(devices, force=True)
    slices = _slices(kube_client, api_node)
    assert len(slices) == 3
    assert {x.spec.pool.resourceSliceCount for x in slices} == {3}
    assert {x.spec.pool.generation for x in slices} == {3}
    assert sorted(d.name for x in slices for d in x.spec.devices) == sorted(
        str(d["name"]) for d in devices
    )
    pub.max_per_slice = 128
    hot_unplugged = devices[:10]
    assert pub.publish(hot_unplugged)
    (s,) = _slices(kube_client, api_node)
    assert s.spec.pool.generation == 4
    assert len(s.spec.devices) == 10

    # a restarted agent continues the generation; a deleted slice is written again
    pub2 = SlicePublisher(agent, api_node)
    assert pub2.publish(hot_unplugged)
    (s,) = _slices(kube_client, api_node)
    assert s.spec.pool.generation == 5
    kube_client.delete(ResourceSlice, s.metadata.name)
    assert not pub2.publish(hot_unplugged)  # no change seen without a re-read
    assert pub2.publish(hot_unplugged, force=True)
    (s,) = _slices(kube_client, api_node)
    assert s.spec.pool.generation == 6
    pub2.delete_all()
    assert _slices(kube_client, api_node) == []


@pytest.mark.cluster
def test_failed_attempts_do_not_push_the_generation_ahead(
    testbed: Testbed, agent: Client, api_node: str, tmp_path: Path
) -> None:
    pub = SlicePublisher(agent, api_node)
    devices = _fake_devices(3)
    assert pub.publish(devices)
    # The API server refuses the next attempts (here: an identity without a node).
    pub.client = cert_client(testbed, tmp_path, "nobody", ("kubeacc:agents",), "kubeacc-agent")
    for _ in range(GENERATION_STEP + 2):
        with pytest.raises(ApiError):
            pub.publish(devices[:2])
    pub.client = agent
    assert pub.publish(devices[:2])  # one step forward: the policy accepts it
    (s,) = _slices(agent, api_node)
    assert s.spec.pool.generation == 2


@pytest.mark.cluster
def test_device_classes_apply(kube_client: Client) -> None:
    assert apply_device_classes(kube_client) == list(CLASS_NAMES)
    got = kube_client.get(DeviceClass, "xpu.kubeacc.io")
    assert "xpu" in got.spec.selectors[0].cel.expression
    assert got.spec.extendedResourceName == "kubeacc.io/xpu"  # kept by the API server
    apply_device_classes(kube_client)  # idempotent
