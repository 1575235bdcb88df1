"""The controller caches only the fields it reads of an Accelerator (kubeacc/controller/kept.py);
its writes must not lose the rest: on the testbed, a device the controller cordons and records a
fault of keeps everything else the API server held (controller on the testbed)."""

from __future__ import annotations

import copy

import pytest
from lightkube import Client
from lightkube.types import PatchType

from kubeacc.controller.controller import CORDONED_BY, Controller
from kubeacc.controller.remediator import FAULT_ANNOTATION
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.remediation import CONDITION_TYPE
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.model import Device, Health, HealthState
from tests.crdfixtures import put_policy, wait_for

pytestmark = pytest.mark.cluster


def test_controller_writes_keep_the_fields_it_does_not_cache(
    controller: Controller, kube_client: Client, fpgas: list[Device]
) -> None:
    dev = copy.deepcopy(fpgas[0])
    dev.health = Health(state=HealthState.UNHEALTHY, reason="port error")
    name = f"node-k-{dev.name}"
    fault_time = "2026-01-01T00:01:00Z"
    body = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {
            "name": name,
            "labels": {"example.com/rack": "r7"},
            "annotations": {"example.com/note": "kept by the API server"},
        },
        "spec": {"node": "node-k", "deviceName": dev.name},
    }
    kube_client.patch(Accelerator, name, body, patch_type=PatchType.APPLY, field_manager="test")
    status = {
        "device": dev.to_json_dict(),
        "hostDriver": "dfl-afu",
        "lastSeen": "2026-01-01T00:00:00Z",
        "lastFault": {"event": "Xid", "xid": 79, "time": fault_time},
        "conditions": [
            {
                "type": "Present",
                "status": "True",
                "reason": "Discovered",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    kube_client.patch(
        Accelerator.Status,
        name,
        {**body, "status": status},
        patch_type=PatchType.APPLY,
        field_manager="test",
        force=True,
    )
    before = as_dict(kube_client.get(Accelerator, name))
    put_policy(
        kube_client,
        "kept-fpgas",
        {
            "selector": {"types": ["fpga"]},
            "onUnhealthy": "Drain",
            "remediation": {"rules": [{"event": "Xid", "xids": [79], "action": "HandToAdmin"}]},
        },
    )

    def written() -> dict | None:  # type: ignore[type-arg]
        acc = as_dict(kube_client.get(Accelerator, name))
        notes = acc["metadata"].get("annotations") or {}
        types = {c["type"] for c in acc["status"].get("conditions") or []}
        done = acc["spec"].get("cordoned") and notes.get(FAULT_ANNOTATION) == fault_time
        return acc if done and CONDITION_TYPE in types else None

    after = wait_for("cordoned, fault recorded, condition written", written)
    # the controller's writes: the cordon (merge patch), the fault annotation (merge patch),
    # its condition (server-side apply)
    assert after["metadata"]["annotations"][CORDONED_BY] == "policy"
    assert after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    # ... and nothing else changed
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["annotations"]["example.com/note"] == "kept by the API server"
    for field in ("device", "hostDriver", "lastSeen", "lastFault"):
        assert after["status"][field] == before["status"][field], field
    assert after["status"]["conditions"][0] == before["status"]["conditions"][0]
    assert after["spec"]["node"] == "node-k" and after["spec"]["deviceName"] == dev.name
    # the cache holds the few fields the passes read
    cached = controller.accelerators.get(name)
    assert cached is not None and "hostDriver" not in cached["status"]
    assert "labels" not in cached["metadata"]
