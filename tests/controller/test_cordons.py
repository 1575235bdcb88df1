"""Cordons and who lifts them, and drains that run out of time (controller on the testbed)."""

from __future__ import annotations

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event

from kubeacc.controller.controller import CORDONED_BY, Controller
from kubeacc.controller.taintrules import DeviceTaintRule, rule_name
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.model import Device, Health, HealthState
from kubeacc.testbed.versions import LANE
from tests.crdfixtures import (
    create_operation,
    operation_finished,
    put_accelerator,
    put_policy,
    wait_for,
)

pytestmark = pytest.mark.cluster


def _cordon(client: Client, name: str) -> tuple[bool, str | None]:
    acc = as_dict(client.get(Accelerator, name))
    by = (acc["metadata"].get("annotations") or {}).get(CORDONED_BY)
    return bool(acc["spec"].get("cordoned")), by


def test_drain_cordon_stays_until_uncordon(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    acc = put_accelerator(kube_client, "node-a", fpgas[0])
    create_operation(kube_client, namespace, "drain", {"action": "Drain", "targets": [acc]})
    op = wait_for("drained", lambda: operation_finished(kube_client, namespace, "drain"))
    assert op["status"]["phase"] == "Succeeded"
    assert "until an Uncordon operation" in op["status"]["message"]
    assert _cordon(kube_client, acc) == (True, f"{namespace}/drain")

    create_operation(kube_client, namespace, "lift", {"action": "Uncordon", "targets": [acc]})
    op = wait_for("uncordoned", lambda: operation_finished(kube_client, namespace, "lift"))
    assert op["status"]["phase"] == "Succeeded", op["status"]
    assert op["status"]["message"] == f"uncordoned {acc}"
    assert _cordon(kube_client, acc) == (False, None)
    events = [e for e in kube_client.list(Event, namespace="default") if e.reason == "Uncordoned"]
    assert any(e.involvedObject and e.involvedObject.name == acc for e in events)


def test_drain_first_that_times_out_names_the_users_and_lifts_its_cordon(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    acc = put_accelerator(
        kube_client,
        "node-a",
        fpgas[1],
        allocated_to=[{"kind": "Pod", "namespace": "team", "name": "busy"}],
    )
    create_operation(
        kube_client,
        namespace,
        "reset",
        {"action": "Reset", "targets": [acc], "drainFirst": True, "timeoutSeconds": 3},
    )
    wait_for("cordoned while draining", lambda: _cordon(kube_client, acc)[0])
    op = wait_for("timed out", lambda: operation_finished(kube_client, namespace, "reset"))
    failed = next(c for c in op["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "DrainTimeout"
    assert "Pod team/busy" in failed["message"]
    assert _cordon(kube_client, acc) == (False, None)


def test_policy_cordon_is_lifted_when_the_device_recovers(
    controller: Controller, kube_client: Client, fpgas: list[Device]
) -> None:
    put_policy(
        kube_client, "drain-sick-fpgas", {"selector": {"types": ["fpga"]}, "onUnhealthy": "Drain"}
    )
    sick = fpgas[0].replace(health=Health(state=HealthState.UNHEALTHY, reason="port error"))
    acc = put_accelerator(kube_client, "node-a", sick)
    assert wait_for("cordoned", lambda: _cordon(kube_client, acc)[0])
    assert _cordon(kube_client, acc) == (True, "policy")
    put_accelerator(kube_client, "node-a", fpgas[0])
    wait_for("uncordoned once healthy", lambda: _cordon(kube_client, acc) == (False, None))


def test_drain_with_evict_is_a_device_taint_rule_where_served_and_refused_cleanly_elsewhere(
    controller: Controller, kube_client: Client, namespace: str, fpgas: list[Device]
) -> None:
    """Kubernetes 1.37 serves resource.k8s.io/v1 DeviceTaintRules; 1.36 does not (its lane)."""
    acc = put_accelerator(kube_client, "node-b", fpgas[0])
    create_operation(
        kube_client, namespace, "evict", {"action": "Drain", "targets": [acc], "evict": True}
    )
    op = wait_for("drained", lambda: operation_finished(kube_client, namespace, "evict"))
    served = LANE.minor != "1.36"
    if not served:
        assert op["status"]["phase"] == "Failed"
        failed = next(c for c in op["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "DeviceTaintRulesNotServed"
        assert "Kubernetes 1.37" in failed["message"]
        assert _cordon(kube_client, acc) == (False, None)  # nothing left half-done
        return
    assert op["status"]["phase"] == "Succeeded", op["status"]
    assert _cordon(kube_client, acc) == (True, f"{namespace}/evict")
    got = as_dict(kube_client.get(DeviceTaintRule, rule_name(acc)))
    assert got["spec"]["deviceSelector"]["device"] == fpgas[0].name
    create_operation(kube_client, namespace, "lift", {"action": "Uncordon", "targets": [acc]})
    op = wait_for("uncordoned", lambda: operation_finished(kube_client, namespace, "lift"))
    rule = rule_name(acc)
    assert op["status"]["message"] == f"uncordoned {acc}; DeviceTaintRules deleted: {rule}"
    with pytest.raises(ApiError) as gone:
        kube_client.get(DeviceTaintRule, rule)
    assert gone.value.status.code == 404
