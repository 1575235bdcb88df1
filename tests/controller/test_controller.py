"""The controller against the real API server: DeviceClasses, operation checks, clean-up."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event
from lightkube.resources.resource_v1 import DeviceClass

from kubeacc import leader
from kubeacc.controller.controller import Controller
from kubeacc.crds.api import NODE_LABEL, TYPE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, AcceleratorPolicy, as_dict
from kubeacc.leader import LeaderElector
from kubeacc.model import Device
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import (
    create_operation,
    make_controller,
    operation_finished,
    put_accelerator,
    running,
    wait_for,
)
from tests.crdfixtures import put_policy as _policy

SHA_A = "a" * 64
SHA_B = "b" * 64


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


def _class_expression(client: Client, name: str) -> str | None:
    try:
        dc = client.get(DeviceClass, name)
    except ApiError:
        return None
    assert dc.spec and dc.spec.selectors and dc.spec.selectors[0].cel
    return dc.spec.selectors[0].cel.expression


def test_policy_change_updates_its_device_class(
    controller: Controller, kube_client: Client, fpgas: list[Device]
) -> None:
    name = f"fpgas-{uuid.uuid4().hex[:5]}"
    cls = f"{name}.policy.kubeacc.io"
    _policy(kube_client, name, {"selector": {"types": ["fpga"]}})
    expr = wait_for("DeviceClass", lambda: _class_expression(kube_client, cls))
    assert expr == (  # whole devices only: a partition is given only where it was asked for
        'device.driver == "kubeacc.io" && device.attributes["kubeacc.io"].type in ["fpga"]'
        ' && !has(device.attributes["kubeacc.io"].migProfile)'
    )
    dc = kube_client.get(DeviceClass, cls)
    assert dc.metadata and dc.metadata.ownerReferences
    assert dc.metadata.ownerReferences[0].kind == "AcceleratorPolicy"

    model = fpgas[0].model
    _policy(
        kube_client,
        name,
        {
            "selector": {"types": ["fpga"], "models": [model]},
            "sharing": {"mode": "TimeSliced", "maxConsumers": 2},
        },
    )
    expr = wait_for(
        "updated DeviceClass",
        lambda: (e := _class_expression(kube_client, cls)) and "model" in e and e,
    )
    assert f'device.attributes["kubeacc.io"].model in ["{model}"]' in expr
    dc = kube_client.get(DeviceClass, cls)
    assert dc.spec and dc.spec.config and dc.spec.config[0].opaque
    params = dc.spec.config[0].opaque.parameters
    assert params["mode"] == "TimeSliced" and params["maxConsumers"] == 2

    pol = wait_for(
        "policy status",
        lambda: (
            (p := as_dict(kube_client.get(AcceleratorPolicy, name)))
            .get("status", {})
            .get("deviceClassName")
            and p
        ),
    )
    assert pol["status"]["deviceClassName"] == cls

    kube_client.delete(AcceleratorPolicy, name)
    wait_for("DeviceClass deleted", lambda: _class_expression(kube_client, cls) is None)


def test_reset_of_a_busy_device_is_refused(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    acc = put_accelerator(
        kube_client,
        "node-a",
        fpgas[0],
        allocated_to=[{"kind": "ResourceClaim", "namespace": "team-a", "name": "train-0"}],
    )
    create_operation(kube_client, namespace, "reset", {"action": "Reset", "targets": [acc]})
    op = wait_for("operation finished", lambda: operation_finished(kube_client, namespace, "reset"))
    assert op["status"]["phase"] == "Failed"
    cond = _condition(op, "Failed")
    assert cond["reason"] == "DeviceInUse"
    assert "ResourceClaim team-a/train-0" in cond["message"]
    assert "drainFirst" in cond["message"]
    assert not op["status"].get("dispatch")


def test_bitstream_not_allowed_by_policy_is_refused(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    pname = f"fpga-images-{uuid.uuid4().hex[:5]}"
    _policy(
        kube_client,
        pname,
        {
            "selector": {"types": ["fpga"]},
            "allowedBitstreams": [{"name": "a.gbs", "sha256": SHA_A}],
        },
    )
    acc = put_accelerator(kube_client, "node-a", fpgas[1])
    create_operation(
        kube_client,
        namespace,
        "program-b",
        {"action": "Program", "targets": [acc], "program": {"bitstream": "b.gbs", "sha256": SHA_B}},
    )
    op = wait_for(
        "operation finished", lambda: operation_finished(kube_client, namespace, "program-b")
    )
    assert op["status"]["phase"] == "Failed"
    cond = _condition(op, "Failed")
    assert cond["reason"] == "BitstreamNotAllowed"
    assert "b.gbs" in cond["message"] and pname in cond["message"]


def test_drain_waits_for_consumers(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    acc = put_accelerator(
        kube_client,
        "node-a",
        fpgas[0],
        allocated_to=[{"kind": "Pod", "name": "p", "namespace": "x"}],
    )
    create_operation(kube_client, namespace, "drain", {"action": "Drain", "targets": [acc]})

    def draining() -> bool:
        obj = as_dict(kube_client.get(AcceleratorOperation, "drain", namespace=namespace))
        conds = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Draining" and c["status"] == "True" for c in conds)

    wait_for("Draining", draining)
    assert as_dict(kube_client.get(Accelerator, acc))["spec"]["cordoned"] is True
    put_accelerator(kube_client, "node-a", fpgas[0], allocated_to=[])
    op = wait_for("drained", lambda: operation_finished(kube_client, namespace, "drain"))
    assert op["status"]["phase"] == "Succeeded"


def test_accelerators_of_vanished_nodes_are_deleted(
    controller: Controller, kube_client: Client, fpgas: list[Device]
) -> None:
    ghost = put_accelerator(kube_client, "ghost-node", fpgas[0])
    kept = put_accelerator(kube_client, "node-a", fpgas[1])

    def gone() -> bool:
        try:
            kube_client.get(Accelerator, ghost)
        except ApiError as exc:
            return exc.status.code == 404
        return False

    wait_for("ghost Accelerator deleted", gone)
    kube_client.get(Accelerator, kept)


def test_one_leader_at_a_time(kube_client: Client, kubeacc_crds: None) -> None:
    lease = f"kubeacc-le-{uuid.uuid4().hex[:5]}"
    a = LeaderElector(kube_client, name=lease, namespace="default", identity="a")
    b = LeaderElector(kube_client, name=lease, namespace="default", identity="b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()


class _Ahead(dt.datetime):
    """The candidate's clock, an hour ahead (skew between nodes, or an NTP step forward)."""

    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
        return dt.datetime.now(tz) + dt.timedelta(hours=1)


def test_a_clock_ahead_takes_no_lease_its_holder_renews(
    kube_client: Client, kubeacc_crds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46: expiry is judged on the candidate's monotonic clock since it saw the Lease
    change, never by comparing its wall clock with the holder's renewTime."""
    lease = f"kubeacc-skew-{uuid.uuid4().hex[:5]}"
    a = LeaderElector(kube_client, name=lease, namespace="default", identity="a", lease_duration=2)
    b = LeaderElector(kube_client, name=lease, namespace="default", identity="b", lease_duration=2)
    assert a.try_acquire_or_renew()
    monkeypatch.setattr(leader, "dt", SimpleNamespace(datetime=_Ahead, UTC=dt.UTC))
    assert not b.try_acquire_or_renew()  # a renewed a moment ago: b's clock says an hour
    for _ in range(3):  # a keeps renewing past the lease's duration: b never takes it
        time.sleep(1)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    time.sleep(2.2)  # a is gone: b takes the Lease once it stayed unchanged for 2 s
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()
    kube_client.delete(Lease, lease, namespace="default")


def test_operation_without_an_agent_times_out(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    acc = put_accelerator(kube_client, "node-a", fpgas[1])
    create_operation(
        kube_client, namespace, "lonely", {"action": "Reset", "targets": [acc], "timeoutSeconds": 2}
    )
    op = wait_for("timeout", lambda: operation_finished(kube_client, namespace, "lonely"))
    assert op["status"]["phase"] == "Failed"
    assert _condition(op, "Failed")["reason"] == "Timeout"
    assert op["status"]["dispatch"][0]["node"] == "node-a"


def test_lease_is_renewed_while_no_pass_runs(testbed: Testbed, kubeacc_crds: None) -> None:
    """Passes wait for changes (resync 300 s here); the Lease keeps its own schedule."""
    lease = f"kubeacc-renew-{uuid.uuid4().hex[:5]}"
    ctl = Controller(
        testbed.client(field_manager="kubeacc-controller"),
        identity="renewer",
        lease_namespace="default",
        lease_name=lease,
        resync_seconds=300,
    )
    client = testbed.client()
    with running(ctl, join=20) as threads:

        def renewed() -> dt.datetime | None:
            try:
                spec = client.get(Lease, lease, namespace="default").spec
            except ApiError:
                return None
            return spec.renewTime if spec and spec.holderIdentity == "renewer" else None

        first = wait_for("lease held", renewed)
        wait_for("first pass", lambda: ctl.passes >= 1)

        def moved_on() -> dt.datetime | None:
            t = renewed()
            return t if t is not None and (t - first).total_seconds() >= 3 else None

        later = wait_for("lease renewed twice", moved_on)
        assert later > first
    assert not threads[0].is_alive()
    released = client.get(Lease, lease, namespace="default").spec
    assert released is not None and released.holderIdentity is None
    client.delete(Lease, lease, namespace="default")


def _op(client: Client, namespace: str, name: str) -> dict[str, Any]:
    return as_dict(client.get(AcceleratorOperation, name, namespace=namespace))


def test_a_target_selector_is_resolved_once_even_across_a_restart(
    testbed: Testbed,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    kube_client: Client,
    namespace: str,
    fpgas: list[Device],
) -> None:
    """The selector's choice is written before anything is done and kept: a controller that
    restarts while the operation waits does not pick the device that has become the better
    match meanwhile."""
    node = f"sel-{uuid.uuid4().hex[:5]}"
    user = [{"kind": "Pod", "namespace": "x", "name": "p"}]
    by_name = dict(sorted((put_accelerator(kube_client, node, d, user), d) for d in fpgas))
    chosen, other = list(by_name)
    spec = {
        "action": "Reset",
        "targetSelector": {"matchLabels": {NODE_LABEL: node, TYPE_LABEL: "fpga"}},
        "drainFirst": True,
        "timeoutSeconds": 120,
    }

    def draining() -> dict[str, Any] | None:
        op = _op(kube_client, namespace, "by-label")
        conds = (op.get("status") or {}).get("conditions") or []
        return op if any(c["type"] == "Draining" and c["status"] == "True" for c in conds) else None

    with running(make_controller(testbed)):
        create_operation(kube_client, namespace, "by-label", spec)
        op = wait_for("Draining", draining)
    # both busy: name order
    assert op["status"]["targets"] == [chosen]
    assert as_dict(kube_client.get(Accelerator, chosen))["spec"]["cordoned"] is True
    # with no controller running, the other device becomes idle: a fresh resolution would take it
    put_accelerator(kube_client, node, by_name[other], allocated_to=[])
    with running(make_controller(testbed)):
        put_accelerator(kube_client, node, by_name[chosen], allocated_to=[])
        op = wait_for(
            "dispatched",
            lambda: (o := _op(kube_client, namespace, "by-label"))["status"].get("dispatch") and o,
        )
    assert op["status"]["targets"] == [chosen]
    assert [d["accelerator"] for d in op["status"]["dispatch"]] == [chosen]
    assert not as_dict(kube_client.get(Accelerator, other))["spec"].get("cordoned")
    assert any(
        e.reason == "TargetsChosen" and chosen in (e.message or "")
        for e in kube_client.list(Event, namespace=namespace)
    )


def test_a_selector_that_matches_nothing_fails_with_the_reason(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    node = f"sel-{uuid.uuid4().hex[:5]}"
    put_accelerator(kube_client, node, fpgas[0])
    for name, labels, reason, says in [
        (
            "no-match",
            {NODE_LABEL: node, TYPE_LABEL: "gpu"},
            "NoTargetMatched",
            "kubeacc.io/type=gpu",
        ),
        ("bad-key", {"a/b/c": "x"}, "InvalidTargetSelector", "spec.targetSelector"),
    ]:
        create_operation(
            kube_client,
            namespace,
            name,
            {"action": "Reset", "targetSelector": {"matchLabels": labels}},
        )
        op = wait_for(name, lambda n=name: operation_finished(kube_client, namespace, n))
        assert op["status"]["phase"] == "Failed"
        cond = _condition(op, "Failed")
        assert cond["reason"] == reason and says in cond["message"], cond
        assert not op["status"].get("targets") and not op["status"].get("dispatch")
        assert any(
            e.reason == reason and e.involvedObject.name == name
            for e in kube_client.list(Event, namespace=namespace)
        )
