"""Remediation's memory (its ledger, read from the cluster's objects) across steps of the
controller's wall clock (issue 46, clock jumps): a rate window or a back-off that holds before
an NTP step holds after it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubeacc.controller.elapsed import Elapsed
from kubeacc.controller.remediation import Decision, Fault, decide
from kubeacc.controller.remediator import REMEDIATION_LABEL, RETURNED_ANNOTATION, ledger_of
from kubeacc.crds.api import EventClass, RemediationAction
from kubeacc.crds.controlread import policy_spec
from kubeacc.crds.views import RemediationView

T0 = dt.datetime(2026, 12, 6, 4, 0, 0, tzinfo=dt.UTC)
HOUR = 3600


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """The controller's wall clock (stepped by NTP) and its monotonic clock (never stepped)."""

    def __init__(self) -> None:
        self.wall = T0 + dt.timedelta(seconds=60)
        self.mono = 500.0

    def now(self) -> float:
        return self.wall.timestamp()

    def tick(self, seconds: float) -> None:
        self.wall += dt.timedelta(seconds=seconds)
        self.mono += seconds


def _section(**extra: Any) -> RemediationView:
    rules = [{"event": "Xid", "xids": [79], "action": "DrainAndReset"}]
    spec = policy_spec({"spec": {"remediation": {"rules": rules, **extra}}})
    assert spec.remediation is not None
    return spec.remediation


def _operation(name: str, target: str, created: dt.datetime) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "kubeacc-system",
            "labels": {REMEDIATION_LABEL: "true"},
            "creationTimestamp": _stamp(created),
        },
        "spec": {"targets": [target]},
    }


def _gpu(name: str, **notes: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": notes}, "spec": {"node": "n1"}}


def _decide(
    section: RemediationView, c: Clock, ops: list[Any], accs: dict[str, Any], e: Elapsed
) -> Decision | None:
    """gpu-b's XID 79 now, by what the objects say remediation did."""
    ledger = ledger_of(ops, accs, c.now(), e.age)
    return decide(section, Fault("gpu-b", "n1", EventClass.XID, xid=79), ledger, c.now())


def test_a_rate_window_holds_across_a_clock_step_forward() -> None:
    """One reset per node per hour: the first was 60 s ago; a step of the clock two hours
    forward must not open the window (before: the window was the wall clock's, and emptied)."""
    c = Clock()
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    section = _section(perNode={"max": 1, "windowSeconds": HOUR})
    ops = [_operation("remediate-a", "gpu-a", T0)]
    accs = {"gpu-a": _gpu("gpu-a"), "gpu-b": _gpu("gpu-b")}
    held = _decide(section, c, ops, accs, e)
    assert held is not None and held.held and "perNode" in held.reason
    c.tick(30)
    c.wall += dt.timedelta(hours=2)  # NTP steps the wall clock
    again = _decide(section, c, ops, accs, e)
    assert again is not None and again.held, again
    c.tick(HOUR)  # the real hour passes: the window opens
    opened = _decide(section, c, ops, accs, e)
    assert opened is not None and opened.action == RemediationAction.DRAIN_AND_RESET
    assert not opened.held


def test_a_back_off_holds_across_a_clock_step_forward() -> None:
    """A device put back 60 s ago fails again: held for a person within the back-off, also
    after the wall clock is stepped past the back-off."""
    c = Clock()
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    section = _section(backoffSeconds=HOUR, perNode={"max": 10})
    accs = {"gpu-b": _gpu("gpu-b", **{RETURNED_ANNOTATION: _stamp(T0)})}
    first = _decide(section, c, [], accs, e)
    assert first is not None and first.action == RemediationAction.HAND_TO_ADMIN
    c.wall += dt.timedelta(hours=3)
    stepped = _decide(section, c, [], accs, e)
    assert stepped is not None and stepped.action == RemediationAction.HAND_TO_ADMIN


def test_a_step_backward_does_not_stretch_a_window() -> None:
    """The wall clock stepped an hour back: an operation seen before keeps its real age, so the
    window still ends an hour after it started by the monotonic clock."""
    c = Clock()
    e = Elapsed(lambda: c.wall, lambda: c.mono)
    section = _section(perNode={"max": 1, "windowSeconds": 600})
    ops = [_operation("remediate-a", "gpu-a", T0)]
    accs = {"gpu-a": _gpu("gpu-a"), "gpu-b": _gpu("gpu-b")}
    held = _decide(section, c, ops, accs, e)
    assert held is not None and held.held
    c.wall -= dt.timedelta(hours=1)
    c.tick(600)
    opened = _decide(section, c, ops, accs, e)
    assert opened is not None and not opened.held
