"""Remediation decisions under a policy's section: rules, back-off and the limits."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pydantic import ValidationError

from kubeacc.controller.remediation import Decision, Fault, Ledger, decide, operation_for
from kubeacc.crds.api import EventClass
from kubeacc.crds.controlread import policy_spec
from kubeacc.crds.remediation import Remediation, RemediationAction
from kubeacc.crds.types import AcceleratorOperationSpec, AcceleratorPolicySpec
from kubeacc.crds.views import RemediationView

HOUR = 3600.0


RULES = [
    {"event": "Xid", "xids": [48, 63, 64, 74, 79, 94, 95], "action": "DrainAndReset"},
    {"event": "EccUncorrectable", "action": "DrainAndPowerCycle"},
    {"event": "FallenOffBus", "action": "HandToAdmin"},
    {"event": "HealthFailing", "failures": 3, "action": "DrainAndReset"},
    {"event": "LinkDown", "action": "Taint"},
]

Section = Callable[..., RemediationView]


def _pydantic(**extra: object) -> RemediationView:
    return Remediation.model_validate({"rules": RULES, **extra})


def _struct(**extra: object) -> RemediationView:
    """The section as the controller reads it: a policy's spec through the schema Structs."""
    spec = policy_spec({"spec": {"remediation": {"rules": RULES, **extra}}})
    assert spec.remediation is not None
    return spec.remediation


@pytest.fixture(params=[_struct, _pydantic], ids=["struct", "pydantic"])
def section(request: pytest.FixtureRequest) -> Section:
    """Makes a remediation section: as the controller reads it (the CRD schema's Struct) and
    as the pydantic model the CLI and docs validate with."""
    maker: Section = request.param
    return maker


def _xid(device: str, node: str = "n1", xid: int = 79) -> Fault:
    return Fault(device, node, EventClass.XID, xid=xid)


def _act(section: RemediationView, fault: Fault, ledger: Ledger, now: float) -> Decision | None:
    d = decide(section, fault, ledger, now)
    if d is not None and d.action in (
        RemediationAction.DRAIN_AND_RESET,
        RemediationAction.DRAIN_AND_POWER_CYCLE,
    ):
        ledger.take_out(fault, now)
    return d


def test_xid_79_drains_and_resets_through_an_operation(section: Section) -> None:
    d = decide(section(), _xid("gpu-a"), Ledger(), 0)
    assert d is not None and d.action == RemediationAction.DRAIN_AND_RESET and not d.held
    assert "XID 79" in d.reason
    op = operation_for(d, "gpu-a", "kubeacc-system", "1")
    assert op is not None
    spec = AcceleratorOperationSpec.model_validate(op["spec"])  # a valid operation
    assert (spec.action, spec.targets, spec.drain_first) == ("Reset", ["gpu-a"], True)


def test_rules_by_event_class(section: Section) -> None:
    s, ledger = section(), Ledger()
    assert decide(s, _xid("gpu-a", xid=13), ledger, 0) is None  # XID 13: application error
    ecc = decide(s, Fault("gpu-a", "n1", EventClass.ECC_UNCORRECTABLE), ledger, 0)
    assert ecc is not None and ecc.action == RemediationAction.DRAIN_AND_POWER_CYCLE
    op = operation_for(ecc, "gpu-a", "ns", "1")
    assert op is not None and op["spec"]["power"] == {"state": "Cycle"}
    lost = decide(s, Fault("gpu-a", "n1", EventClass.FALLEN_OFF_BUS), ledger, 0)
    assert lost is not None and lost.action == RemediationAction.HAND_TO_ADMIN
    assert operation_for(lost, "gpu-a", "ns", "1") is None
    assert decide(s, Fault("gpu-a", "n1", EventClass.HEALTH_FAILING, failures=2), ledger, 0) is None
    third = decide(s, Fault("gpu-a", "n1", EventClass.HEALTH_FAILING, failures=3), ledger, 0)
    assert third is not None and third.action == RemediationAction.DRAIN_AND_RESET
    assert decide(s, Fault("nic-a", "n1", EventClass.FPGA_PORT_ERROR), ledger, 0) is None


def test_failing_again_within_the_backoff_stays_out(section: Section) -> None:
    s, ledger = section(backoffSeconds=int(6 * HOUR), perDevice={"max": 5}), Ledger()
    assert _act(s, _xid("gpu-a"), ledger, 0) is not None
    assert decide(s, _xid("gpu-a"), ledger, 10) is None  # already out: nothing new
    ledger.put_back("gpu-a", 600)
    again = decide(s, _xid("gpu-a"), ledger, 600 + HOUR)
    assert again is not None and again.held
    assert again.action == RemediationAction.HAND_TO_ADMIN
    assert "left tainted for a person" in again.reason
    later = decide(s, _xid("gpu-a"), ledger, 600 + 7 * HOUR)  # past the back-off
    assert later is not None and later.action == RemediationAction.DRAIN_AND_RESET


def test_fleet_limit_stops_a_burst(section: Section) -> None:
    s, ledger = section(maxDevicesOut=2, perNode={"max": 10}, perFleet={"max": 10}), Ledger()
    decisions = [_act(s, _xid(f"gpu-{i}", node=f"n{i}"), ledger, i) for i in range(6)]
    actions = [d.action for d in decisions if d is not None]
    assert actions.count(RemediationAction.DRAIN_AND_RESET) == 2
    assert actions.count(RemediationAction.TAINT) == 4  # held back, but tainted
    assert ledger.out == {"gpu-0", "gpu-1"}
    held = decisions[2]
    assert held is not None and held.held and "maxDevicesOut 2" in held.reason


def test_rate_limits_per_node_and_fleet(section: Section) -> None:
    s = section(maxDevicesOut=100, perNode={"max": 1}, perFleet={"max": 3, "windowSeconds": 600})
    ledger = Ledger()
    first = _act(s, _xid("gpu-a", "n1"), ledger, 0)
    assert first is not None and first.action == RemediationAction.DRAIN_AND_RESET
    same_node = _act(s, _xid("gpu-b", "n1"), ledger, 1)
    assert same_node is not None and "perNode limit 1" in same_node.reason
    for i, node in enumerate(("n2", "n3")):
        d = _act(s, _xid(f"gpu-{node}", node), ledger, 2 + i)
        assert d is not None and d.action == RemediationAction.DRAIN_AND_RESET
    fleet = _act(s, _xid("gpu-x", "n4"), ledger, 10)
    assert fleet is not None and "perFleet limit 3 in 600 s" in fleet.reason
    after = _act(s, _xid("gpu-y", "n5"), ledger, 700)  # the window has passed
    assert after is not None and after.action == RemediationAction.DRAIN_AND_RESET


def test_policy_section_is_validated() -> None:
    spec = AcceleratorPolicySpec.model_validate(
        {
            "selector": {"types": ["gpu"]},
            "remediation": {"rules": [{"event": "Xid", "xids": [79], "action": "DrainAndReset"}]},
        }
    )
    assert spec.remediation is not None and spec.remediation.max_devices_out == 1
    with pytest.raises(ValidationError):
        Remediation.model_validate({"rules": []})
    with pytest.raises(ValidationError):
        Remediation.model_validate({"rules": [{"event": "Xid", "xids": [0], "action": "Taint"}]})
    with pytest.raises(ValidationError):
        Remediation.model_validate({"rules": [{"event": "Xid", "action": "Reboot"}]})
