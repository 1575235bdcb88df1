"""The controller keeps a few fields of each Accelerator and Node (kubeacc/controller/kept.py):
its passes decide and write exactly the same on kept objects as on whole ones (controller on
the testbed).

Realistic Accelerators (a synthetic ``dgx-h100``'s GPUs and a NIC, with what others write: other
labels and annotations, the agent's condition, lastSeen, hostDriver) and operations are created
in the testbed's API server. A controller whose caches hold whole objects (the code before
kept.py) runs three passes over them; then everything is deleted, created again the same way,
and a controller with kept caches runs three passes. The Accelerators, operations and Events
that result, and the out-of-service metric, must be the same but for times, uids and
resourceVersions. Each object exercises one reader: unhealthy-device cordons (set and lifted),
remediation (a new fault, a device back after its operation, a cordon a person lifted), garbage
collection of a gone node's device, operations (a new one validated from a GET and dispatched,
one draining while its device is in use, a drainFirst one ending and lifting its cordon).
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from kubeacc.contracts.names import CORDONED_BY_ANNOTATION
from kubeacc.controller import kept
from kubeacc.controller.controller import Controller
from kubeacc.controller.remediator import CONDITION, FAULT_ANNOTATION, OPERATION_ANNOTATION
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, AcceleratorPolicy, as_dict
from kubeacc.model import Device, DeviceType, Health, HealthState
from kubeacc.node.nodelabels import accelerator_labels
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import (
    T0,
    agent_status,
    make_controller,
    put_policy,
    wait_for,
    wait_until_no_claim_holds,
)
from tests.hosts import discover

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

FAULT_TIME = "2026-01-01T00:01:00Z"
GONE = "kept-gone-node"
POLICY = "kept-gpus"
#: ISO times anywhere in a value (annotations, messages): the two runs are not at one moment.
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


@pytest.fixture(scope="module")
def devices(tmp_path_factory: pytest.TempPathFactory) -> list[Device]:
    inv = discover(Path(build("dgx-h100", tmp_path_factory.mktemp("host") / "root")))
    return inv.by_type(DeviceType.GPU) + inv.by_type(DeviceType.NIC)


def _put_accelerator(
    client: Client,
    node: str,
    dev: Device,
    *,
    health: HealthState = HealthState.HEALTHY,
    cordoned_by: str | None = None,
    notes: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> str:
    """An Accelerator as the node agent and others left it: spec and metadata by one manager,
    status by the agent, with fields no pass reads."""
    name = f"{node}-{dev.name}"
    device = copy.deepcopy(dev)
    device.health = Health(state=health, reason="" if health is HealthState.HEALTHY else "Xid 79")
    annotations = {"example.com/owner": "team-a", **(notes or {})}
    if cordoned_by is not None:
        annotations[CORDONED_BY_ANNOTATION] = cordoned_by
    body = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {
            "name": name,
            "labels": {**accelerator_labels(node, dev), "example.com/rack": "r7"},
            "annotations": annotations,
        },
        "spec": {"node": node, "deviceName": dev.name, "cordoned": cordoned_by is not None},
    }
    client.patch(Accelerator, name, body, patch_type=PatchType.APPLY, field_manager="test")
    full = agent_status(device, **(status or {}))
    client.patch(
        Accelerator.Status,
        name,
        {**body, "status": full},
        patch_type=PatchType.APPLY,
        field_manager="kubeacc-node-agent",
        force=True,
    )
    return name


def _put_operation(
    client: Client, ns: str, name: str, spec: dict[str, Any], status: dict[str, Any] | None
) -> None:
    body = {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorOperation",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }
    client.patch(
        AcceleratorOperation,
        name,
        body,
        namespace=ns,
        patch_type=PatchType.APPLY,
        field_manager="test",
    )
    if status is not None:
        client.patch(
            AcceleratorOperation.Status,
            name,
            {**body, "status": status},
            namespace=ns,
            patch_type=PatchType.APPLY,
            field_manager="test",
            force=True,
        )


def _world(client: Client, node: str, ns: str, devices: list[Device]) -> list[str]:
    """The cases of the module docstring, created in the API server; the Accelerators' names."""
    gpus = [d for d in devices if d.type is DeviceType.GPU]
    nic = next(d for d in devices if d.type is DeviceType.NIC)
    remediating = {
        "type": CONDITION,
        "status": "True",
        "reason": "Draining",
        "message": "",
        "lastTransitionTime": T0,
    }
    present = {"type": "Present", "status": "True", "reason": "Discovered", "message": ""}
    conditions = [{**present, "lastTransitionTime": T0}, remediating]
    busy = [{"kind": "Pod", "namespace": ns, "name": "busy"}]
    fault = {"event": "Xid", "xid": 79, "time": FAULT_TIME}
    name = [
        _put_accelerator(client, node, gpus[0]),  # a new Reset operation targets it
        _put_accelerator(client, node, gpus[1], health=HealthState.UNHEALTHY),  # cordoned
        _put_accelerator(client, node, gpus[2], cordoned_by="policy"),  # healthy again: lifted
        _put_accelerator(client, node, gpus[3], status={"lastFault": fault}),  # taken out
        _put_accelerator(  # its remediation succeeded, healthy: returned
            client,
            node,
            gpus[4],
            cordoned_by="remediation",
            notes={OPERATION_ANNOTATION: f"{ns}/fixed", FAULT_ANNOTATION: T0},
            status={"conditions": conditions},
        ),
        _put_accelerator(client, node, gpus[5], status={"conditions": conditions}),  # by hand
        _put_accelerator(client, GONE, nic),  # its node is gone
        _put_accelerator(client, node, gpus[6], status={"allocatedTo": busy}),  # a drain waits
        _put_accelerator(client, node, gpus[7], cordoned_by=f"{ns}/reset-first"),  # op ends
    ]
    _put_operation(
        client,
        ns,
        "fixed",
        {"action": "Reset", "targets": [name[4]]},
        {"phase": "Succeeded", "message": "Reset done"},
    )
    _put_operation(client, ns, "reset", {"action": "Reset", "targets": [name[0]]}, None)
    _put_operation(client, ns, "drain", {"action": "Drain", "targets": [name[7]]}, None)
    dispatched = [{"accelerator": name[8], "node": node, "deviceName": gpus[7].name}]
    done = [{"accelerator": name[8], "node": node, "phase": "Succeeded", "message": "ok"}]
    _put_operation(
        client,
        ns,
        "reset-first",
        {"action": "Reset", "targets": [name[8]], "drainFirst": True},
        {
            "phase": "Running",
            "targets": [name[8]],
            "startTime": T0,
            "dispatch": dispatched,
            "results": done,
        },
    )
    return name


def _ops(client: Client, ns: str) -> list[dict[str, Any]]:
    return [as_dict(o) for o in client.list(AcceleratorOperation, namespace=ns)]


def _mine(client: Client, node: str) -> list[dict[str, Any]]:
    """The Accelerators of the testbed's node and of the gone one."""
    every = (as_dict(a) for a in client.list(Accelerator))
    return [a for a in every if (a.get("spec") or {}).get("node") in (node, GONE)]


def _delete_all(client: Client, node: str, ns: str) -> None:
    """This test's Accelerators and operations, gone from the API server."""
    for acc in _mine(client, node):
        with contextlib.suppress(ApiError):
            client.delete(Accelerator, acc["metadata"]["name"])
    for op in _ops(client, ns):
        with contextlib.suppress(ApiError):
            client.delete(AcceleratorOperation, op["metadata"]["name"], namespace=ns)
    wait_for(
        "nothing of the last run left", lambda: not _mine(client, node) and not _ops(client, ns)
    )


def _normal(obj: Any) -> Any:
    """``obj`` without what differs between two runs: times, uids, resourceVersions."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("uid", "resourceVersion", "creationTimestamp", "time"):
                continue
            out[k] = _normal(v)
            if k == "managedFields":  # who wrote what; in the order of the writes' times
                out[k] = sorted(out[k], key=repr)
        return out
    if isinstance(obj, list):
        return [_normal(v) for v in obj]
    if isinstance(obj, str):
        return TIME.sub("T", obj)
    return obj


def _run(
    monkeypatch: pytest.MonkeyPatch,
    testbed: Testbed,
    client: Client,
    ns: str,
    devices: list[Device],
    *,
    whole: bool,
) -> dict[str, Any]:
    """Three passes of a controller caching whole objects or the kept fields, over the world
    created afresh; what resulted in the API server and the out-of-service metric."""
    names = _world(client, testbed.node_name, ns, devices)
    uids = {a["metadata"]["uid"] for a in _mine(client, testbed.node_name)}
    with monkeypatch.context() as m:
        if whole:
            m.setattr(kept, "accelerator", lambda obj: obj)
            m.setattr(kept, "node", lambda obj: obj)
        ctl: Controller = make_controller(testbed)
    ctl.node_grace_seconds = 0.0
    ctl.remediation.namespace = ns
    for c in ctl.caches:
        c.start()
    try:

        def seen() -> bool:
            return (
                all(c.synced.is_set() for c in ctl.caches)
                and all(ctl.accelerators.get(n) is not None for n in names)
                and all(ctl.operations.get(n, ns) for n in ("fixed", "reset", "reset-first"))
                and ctl.operations.get("drain", ns) is not None
                and ctl.policies.get(POLICY) is not None
                and ctl.nodes.get(testbed.node_name) is not None
            )

        wait_for("the controller's caches hold the world", seen)
        for _ in range(3):
            ctl.reconcile_once()
        cached = ctl.accelerators.get(names[0])
    finally:
        for c in ctl.caches:
            c.close()
        ctl.drains.close()
    assert cached is not None
    # the caches were what this run says they were
    assert ("hostDriver" in cached["status"]) is whole
    ops = _ops(client, ns)
    uids |= {o["metadata"]["uid"] for o in ops}
    events = [
        as_dict(e)
        for space in ("default", ns)
        for e in client.list(Event, namespace=space)
        if e.involvedObject and e.involvedObject.uid in uids
    ]
    metric = [
        (s.labels, s.value)
        for family in ctl.metrics.registry.collect()
        if family.name == "kubeacc_controller_devices_out_of_service"
        for s in family.samples
    ]
    policy = as_dict(client.get(AcceleratorPolicy, POLICY))
    return {
        "accelerators": _normal(
            sorted(_mine(client, testbed.node_name), key=lambda a: a["metadata"]["name"])
        ),
        "operations": _normal(sorted(ops, key=lambda o: o["metadata"]["name"])),
        "events": sorted(
            (
                e["involvedObject"]["kind"],
                e["involvedObject"]["name"],
                e.get("type"),
                e["reason"],
                TIME.sub("T", e["message"]),
                e.get("count"),
            )
            for e in events
        ),
        "metric": sorted(metric, key=repr),
        "policy": _normal(policy.get("status")),
    }


@pytest.fixture
def world(testbed: Testbed, kube_client: Client, namespace: str) -> Iterator[str]:
    """The namespace of the test's operations; no Accelerators of the testbed's node or the
    gone one from earlier tests (their cordons and faults would count), none left after."""
    wait_until_no_claim_holds(kube_client, testbed.node_name)
    _delete_all(kube_client, testbed.node_name, namespace)
    rules = [{"event": "Xid", "xids": [79], "action": "DrainAndReset"}]
    put_policy(
        kube_client,
        POLICY,
        {
            "selector": {"types": ["gpu"]},
            "onUnhealthy": "Drain",
            "remediation": {"maxDevicesOut": 4, "rules": rules},
        },
    )
    yield namespace
    _delete_all(kube_client, testbed.node_name, namespace)


def test_passes_decide_and_write_the_same_on_kept_objects(
    monkeypatch: pytest.MonkeyPatch,
    testbed: Testbed,
    kube_client: Client,
    devices: list[Device],
    world: str,
) -> None:
    started = time.monotonic()
    whole = _run(monkeypatch, testbed, kube_client, world, devices, whole=True)
    _delete_all(kube_client, testbed.node_name, world)
    cut = _run(monkeypatch, testbed, kube_client, world, devices, whole=False)
    # every case did its part (else the comparison proves nothing)
    reasons = {e[3] for e in whole["events"]}
    assert {
        "Cordoned",
        "Uncordoned",
        "RemediationDraining",
        "RemediationReturned",
        "RemediationUncordoned",
        "NodeGone",
        "Validated",
        "Dispatched",
        "Succeeded",
    } <= reasons, reasons
    drain = next(o for o in whole["operations"] if o["metadata"]["name"] == "drain")
    assert "used by Pod" in drain["status"]["message"]
    assert any(o["metadata"]["name"].startswith("remediat") for o in whole["operations"])
    gone = [a for a in whole["accelerators"] if a["spec"]["node"] == GONE]
    assert not gone
    assert len(whole["metric"]) >= 3
    for part in ("accelerators", "operations", "events", "metric", "policy"):
        assert cut[part] == whole[part], part
    assert time.monotonic() - started < 90
