"""The device status writer on the testbed's API server, for what issue 46's fault runner found:
``status.devices`` of claims prepared during an outage lost after five tries (now a claim's
entries are written once the API server is back, and a claim unprepared meanwhile gets no
entries from the older, failed write: nothing written from a stale state), and a memory share's
entry refused (it named the device without the allocation's ``shareID``)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.dra.checkpoint import PreparedDevice
from kubeacc.agent.dra.devicestatus import DeviceStatusWriter, device_entries
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.testbed import Testbed
from tests.nodestack import resource_claim
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

NODE = "outage-node"


def _allocated_claim(client: Client, name: str, ns: str, **extra: Any) -> str:
    """A claim allocated one device of this test's pool (as a scheduler writes it); its UID."""
    request = {"name": "acc", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}
    created = as_dict(client.create(resource_claim(name, ns, [request])))
    result = {"request": "acc", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-0", **extra}
    client.patch(
        ResourceClaim.Status,
        name,
        {"status": {"allocation": {"devices": {"results": [result]}}}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    return str(created["metadata"]["uid"])


def _entry() -> dict[str, Any]:
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
        "message": "",
        "lastTransitionTime": "2026-12-06T00:00:00Z",
    }
    return {"driver": DRIVER_NAME, "pool": NODE, "device": "gpu-0", "conditions": [ready]}


def _devices(client: Client, name: str, ns: str) -> list[dict[str, Any]]:
    claim = as_dict(client.get(ResourceClaim, name, namespace=ns))
    return list((claim.get("status") or {}).get("devices") or [])


def test_status_written_after_a_long_outage_and_a_claim_unprepared_meanwhile_left_empty(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    kept = _allocated_claim(kube_client, "kept", namespace)
    gone = _allocated_claim(kube_client, "gone", namespace)
    writer = DeviceStatusWriter(testbed.client(field_manager="writer"), NODE, retry_delay=0.2)
    writer.start()
    try:
        testbed.stop_apiserver()
        try:
            writer.prepared(namespace, "kept", kept, [_entry()])
            writer.prepared(namespace, "gone", gone, [_entry()])
            time.sleep(2)  # both writes failed and wait for their next try
            writer.unprepared(namespace, "gone", gone)
            # longer than five tries at the first delays (the old writer gave up after 1 s)
            time.sleep(3)
        finally:
            testbed.start_apiserver()
        eventually(lambda: _devices(kube_client, "kept", namespace), 90, "kept's status")
        (entry,) = _devices(kube_client, "kept", namespace)
        assert (entry["pool"], entry["device"]) == (NODE, "gpu-0")
        # the older write of "gone" never lands after its removal
        time.sleep(10)
        assert _devices(kube_client, "gone", namespace) == []
    finally:
        writer.stop()


def test_a_memory_shares_entry_names_its_share_and_is_written(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    share = "0a1b2c3d-0000-4000-8000-000000000001"
    uid = _allocated_claim(kube_client, "share", namespace, shareID=share)
    prepared = [PreparedDevice(["acc"], NODE, "gpu-0", [], share_id=share)]
    (entry,) = device_entries(NODE, prepared, {})
    assert entry["shareID"] == share
    writer = DeviceStatusWriter(testbed.client(field_manager="writer"), NODE, retry_delay=0.2)
    writer.start()
    try:
        writer.prepared(namespace, "share", uid, [entry])
        eventually(lambda: _devices(kube_client, "share", namespace), 30, "the share's status")
        (written,) = _devices(kube_client, "share", namespace)
        assert (written["device"], written["shareID"]) == ("gpu-0", share)
    finally:
        writer.stop()
