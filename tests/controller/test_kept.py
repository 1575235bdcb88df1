"""The controller keeps a few fields of each Accelerator (kubeacc/controller/kept.py): its passes
decide and write exactly the same on kept objects as on whole ones.

Two controllers, one caching whole objects (the code before kept.py), one the kept fields, run
the same passes over realistic Accelerators (a synthetic ``dgx-h100``'s GPUs and NICs, with
what the API server adds: managed fields, other annotations and conditions, lastSeen) against
a fake API server that records every request. Each case exercises one reader: unhealthy-device
cordons, remediation (a new fault, a device coming back, a cordon a person lifted), garbage
collection of a gone node's devices, operations (a new one validated from a GET, one draining
while the device is in use, a drainFirst one ending and lifting its cordon) and the
out-of-service metric.
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest

from kubeacc.controller import kept
from kubeacc.controller.controller import Controller
from kubeacc.controller.remediator import FAULT_ANNOTATION, OPERATION_ANNOTATION
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import as_dict
from kubeacc.crds.watch import WatchCache
from kubeacc.model import Device, DeviceType, Health, HealthState
from kubeacc.model.names import CORDONED_BY_ANNOTATION
from kubeacc.synthetic.profiles import build
from tests.hosts import discover

NS = "kube-system"
T0 = "2026-01-01T00:00:00Z"


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    """A JSON merge patch; lists of conditions merge by type (their map-list keys)."""
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif key == "conditions" and isinstance(value, list):
            by_type = {c["type"]: c for c in into.get(key) or []}
            by_type.update({c["type"]: c for c in value})
            into[key] = list(by_type.values())
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _timeless(obj: Any) -> Any:
    """``obj`` without the times (two runs are not at the same moment)."""
    if isinstance(obj, dict):
        return {
            k: "T" if k.lower().endswith(("time", "timestamp")) else _timeless(v)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_timeless(v) for v in obj]
    return obj


class FakeAPI:
    """Objects by (kind, name); records every write and Event."""

    config = None

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in objects}
        self.writes: list[Any] = []
        self._versions = itertools.count(1000)

    @staticmethod
    def _kind(res: Any) -> str:
        return str(res._api_info.resource.kind)

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    def get(self, res: Any, name: str, **_: Any) -> dict[str, Any]:
        return copy.deepcopy(self.store[(self._kind(res), name)])

    def list(self, res: Any, **_: Any) -> list[dict[str, Any]]:
        kind = self._kind(res)
        return [copy.deepcopy(o) for (k, _n), o in sorted(self.store.items()) if k == kind]

    def patch(self, res: Any, name: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        kind = self._kind(res)
        self.writes.append(("patch", kind, name, _timeless(body), str(kw.get("patch_type"))))
        obj = self.store.setdefault(
            (kind, name), {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}
        )
        _merge(obj, {k: v for k, v in body.items() if k not in ("apiVersion", "kind")})
        return self._bump(obj)

    def create(self, obj: Any, **_: Any) -> dict[str, Any]:
        data = as_dict(obj)
        if not isinstance(data.get("metadata"), dict):  # a generic resource made with ObjectMeta
            data["metadata"] = data["metadata"].to_dict()
        kind = str(data.get("kind") or type(obj).__name__)
        if kind == "Event":
            ref = data["involvedObject"]
            about = {k: ref.get(k) for k in ("kind", "name", "uid", "resourceVersion")}
            self.writes.append(("event", data["reason"], data["message"], about))
            return data
        self.writes.append(("create", kind, _timeless(data)))
        self.store[(kind, data["metadata"]["name"])] = data
        return self._bump(data)

    def delete(self, res: Any, name: str, **_: Any) -> None:
        self.writes.append(("delete", self._kind(res), name))
        self.store.pop((self._kind(res), name), None)


@pytest.fixture(scope="module")
def devices(tmp_path_factory: pytest.TempPathFactory) -> list[Device]:
    inv = discover(Path(build("dgx-h100", tmp_path_factory.mktemp("host") / "root")))
    return inv.by_type(DeviceType.GPU) + inv.by_type(DeviceType.NIC)


def _accelerator(
    i: int,
    node: str,
    dev: Device,
    *,
    health: HealthState = HealthState.HEALTHY,
    cordoned_by: str | None = None,
    status: dict[str, Any] | None = None,
    notes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An Accelerator as the API server answers it (managed fields and all)."""
    device = copy.deepcopy(dev)
    device.health = Health(state=health, reason="" if health is HealthState.HEALTHY else "Xid 79")
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "{}", **(notes or {})}
    if cordoned_by is not None:
        annotations[CORDONED_BY_ANNOTATION] = cordoned_by
    present = {"type": "Present", "status": "True", "reason": "Discovered", "message": ""}
    return {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {
            "name": f"{node}-{dev.name}",
            "uid": f"uid-{i}",
            "resourceVersion": str(100 + i),
            "generation": 1,
            "creationTimestamp": T0,
            "labels": {"kubeacc.io/node": node},
            "annotations": annotations,
            "managedFields": [{"manager": "agent", "operation": "Apply", "fieldsV1": {}}],
        },
        "spec": {"node": node, "deviceName": dev.name, "cordoned": cordoned_by is not None},
        "status": {
            "device": device.to_json_dict(),
            "hostDriver": "nvidia",
            "lastSeen": T0,
            "allocatedTo": [],
            "conditions": [{**present, "lastTransitionTime": T0}],
            **(status or {}),
        },
    }


def _operation(name: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorOperation",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "50",
            "generation": 1,
            "creationTimestamp": T0,
        },
        "spec": spec,
        "status": status,
    }


def _world(devices: list[Device]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Accelerators, everything else) of the cases in the module docstring."""
    gpus = [d for d in devices if d.type is DeviceType.GPU]
    nic = next(d for d in devices if d.type is DeviceType.NIC)
    remediating = {"type": "Remediation", "status": "True", "reason": "Draining", "message": ""}
    remediating["lastTransitionTime"] = T0
    fault = {"event": "Xid", "xid": 79, "time": "2026-01-01T00:01:00Z"}
    busy = [{"kind": "Pod", "namespace": "team", "name": "busy"}]
    accs = [
        _accelerator(0, "n1", gpus[0]),  # a new Reset operation targets it
        _accelerator(1, "n1", gpus[1], health=HealthState.UNHEALTHY),  # cordoned by the policy
        _accelerator(2, "n1", gpus[2], cordoned_by="policy"),  # healthy again: lifted
        _accelerator(3, "n1", gpus[3], status={"lastFault": fault}),  # taken out
        _accelerator(  # its remediation succeeded, healthy: returned
            4,
            "n1",
            gpus[4],
            cordoned_by="remediation",
            notes={OPERATION_ANNOTATION: f"{NS}/fixed", FAULT_ANNOTATION: "x"},
            status={"conditions": [remediating]},
        ),
        _accelerator(5, "n1", gpus[5], status={"conditions": [remediating]}),  # lifted by hand
        _accelerator(6, "gone", nic),  # its node is gone
        _accelerator(7, "n1", gpus[6], status={"allocatedTo": busy}),  # a drain waits
        _accelerator(8, "n1", gpus[7], cordoned_by=f"{NS}/reset-first"),  # its op ends
    ]
    name = [a["metadata"]["name"] for a in accs]
    rules = [{"event": "Xid", "xids": [79], "action": "DrainAndReset"}]
    policy = {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": "gpus", "uid": "uid-gpus", "resourceVersion": "40", "generation": 1},
        "spec": {
            "selector": {"types": ["gpu"]},
            "onUnhealthy": "Drain",
            "remediation": {"maxDevicesOut": 4, "rules": rules},
        },
    }
    dispatched = [{"accelerator": name[8], "node": "n1", "deviceName": gpus[7].name}]
    done = [{"accelerator": name[8], "node": "n1", "phase": "Succeeded", "message": "ok"}]
    others = [
        policy,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": "1"}},
        _operation("fixed", {"action": "Reset", "targets": [name[4]]}, {"phase": "Succeeded"}),
        _operation("reset", {"action": "Reset", "targets": [name[0]]}, {}),
        _operation(
            "drain",
            {"action": "Drain", "targets": [name[7]]},
            {"phase": "Pending", "targets": [name[7]]},
        ),
        _operation(
            "reset-first",
            {"action": "Reset", "targets": [name[8]], "drainFirst": True},
            {"phase": "Running", "startTime": T0, "dispatch": dispatched, "results": done},
        ),
    ]
    return accs, others


def _run(
    monkeypatch: pytest.MonkeyPatch, devices: list[Device], *, whole: bool
) -> tuple[FakeAPI, list[Any]]:
    """Two passes of a controller that caches whole objects or the kept fields; the fake API
    server afterwards and the out-of-service metric's samples."""
    accs, others = _world(devices)
    api = FakeAPI(accs + others)
    monkeypatch.setattr(WatchCache, "start", lambda self: None)  # the drains' slice watch
    with monkeypatch.context() as m:
        if whole:
            m.setattr(kept, "accelerator", lambda obj: obj)
            m.setattr(kept, "node", lambda obj: obj)
        ctl = Controller(api, identity="t", node_grace_seconds=0.0)  # type: ignore[arg-type]
    ctl.remediation.clock = lambda: 1_800_000_000.0
    for obj in accs + others:
        cache = {
            "Accelerator": ctl.accelerators,
            "Node": ctl.nodes,
            "AcceleratorPolicy": ctl.policies,
            "AcceleratorOperation": ctl.operations,
        }[obj["kind"]]
        cache.observe(copy.deepcopy(obj))
    for _ in range(2):
        ctl.reconcile_once()
    metric = [
        (s.labels, s.value)
        for family in ctl.metrics.registry.collect()
        if family.name == "kubeacc_controller_devices_out_of_service"
        for s in family.samples
    ]
    return api, sorted(metric, key=repr)


def test_passes_decide_and_write_the_same_on_kept_objects(
    monkeypatch: pytest.MonkeyPatch, devices: list[Device]
) -> None:
    whole, whole_metric = _run(monkeypatch, devices, whole=True)
    cut, cut_metric = _run(monkeypatch, devices, whole=False)
    # every case did its part (else the comparison proves nothing)
    reasons = {w[1] for w in whole.writes if w[0] == "event"}
    assert {
        "Cordoned",
        "Uncordoned",
        "RemediationDraining",
        "RemediationReturned",
        "RemediationUncordoned",
        "NodeGone",
        "Dispatched",
        "Succeeded",
        "DeviceTaintRuleDeleted",
    } <= reasons
    assert any("used by Pod team/busy" in str(w) for w in whole.writes if w[0] == "patch")
    assert any(w[:2] == ("create", "AcceleratorOperation") for w in whole.writes)
    assert cut.writes == whole.writes
    assert cut_metric == whole_metric and len(whole_metric) >= 3
    assert _timeless(list(cut.store.values())) == _timeless(list(whole.store.values()))


def test_a_kept_accelerator_holds_only_what_passes_read(devices: list[Device]) -> None:
    [acc, *_], _ = _world(devices)
    acc["metadata"]["annotations"][CORDONED_BY_ANNOTATION] = "policy"
    small = kept.accelerator(copy.deepcopy(acc))
    assert small["metadata"] == {
        "name": acc["metadata"]["name"],
        "uid": "uid-0",
        "resourceVersion": "100",
        "annotations": {CORDONED_BY_ANNOTATION: "policy"},
    }
    assert small["spec"] == acc["spec"]
    assert set(small["status"]) == {"device", "allocatedTo"}  # no Present condition, lastSeen
    assert set(small["status"]["device"]) == set(kept.DEVICE)
    assert kept.node({"metadata": {"name": "n1", "resourceVersion": "3", "labels": {}}}) == {
        "metadata": {"name": "n1", "resourceVersion": "3"}
    }
    # repeated strings are one object: two nodes' same-model devices share theirs
    other = kept.accelerator(copy.deepcopy(acc))
    assert other["status"]["device"]["model"] is small["status"]["device"]["model"]
    assert other["spec"]["node"] is small["spec"]["node"]
