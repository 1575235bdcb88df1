"""Remediation decisions: which action a device fault gets under its policy's ``remediation``
section, within the section's limits (kubeacc.crds.remediation, docs/remediation.md). The
section and its rules are the policy's schema Structs (kubeacc.crds.controlread); the pydantic
types have the same attributes.

Pure: given the fault, the policy's section and what remediation has done so far (its
:class:`Ledger`), :func:`decide` answers one :class:`Decision`; the controller carries it out
with the existing operations (:func:`operation_for`: ``Reset`` or ``Power: Cycle`` with
``drainFirst``) and records every step as an Event. A decision that a limit holds back is
``Taint`` with the limit as its reason, so a device is never left serving work after a fault
that a rule covers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubeacc.crds.api import API_VERSION, REMEDIATION_LIMITS, EventClass, RemediationAction
from kubeacc.crds.views import RemediationRuleView, RemediationView

#: Name prefix of the operations remediation creates.
OPERATION_PREFIX = "remediate-"


@dataclass(frozen=True)
class Fault:
    """One fault of one device, as the node reported it."""

    device: str  # Accelerator name
    node: str
    event: EventClass
    xid: int | None = None
    #: HealthFailing: consecutive failed checks so far.
    failures: int = 1


@dataclass(frozen=True)
class Decision:
    action: RemediationAction
    reason: str
    rule: RemediationRuleView | None = None
    #: True when a limit or the back-off changed the rule's action.
    held: bool = False


@dataclass
class Ledger:
    """What remediation did: when it took each device out, the devices out now, when each
    device was last put back."""

    started: list[tuple[float, str, str]] = field(default_factory=list)  # (time, device, node)
    out: set[str] = field(default_factory=set)
    returned: dict[str, float] = field(default_factory=dict)

    def take_out(self, fault: Fault, now: float) -> None:
        self.started.append((now, fault.device, fault.node))
        self.out.add(fault.device)

    def put_back(self, device: str, now: float) -> None:
        self.out.discard(device)
        self.returned[device] = now

    def count(self, limit: Limit, now: float, *, device: str = "", node: str = "") -> int:
        since = now - limit.window_seconds
        return sum(
            1
            for at, d, n in self.started
            if at > since and (not device or d == device) and (not node or n == node)
        )


@dataclass(frozen=True)
class Limit:
    """One rate limit of a section: at most ``max`` started within ``window_seconds``."""

    max: int
    window_seconds: int


def limits(section: RemediationView) -> list[tuple[str, Limit]]:
    """The section's rate limits by their API name, a limit left out at its default."""
    out = []
    for name, default in REMEDIATION_LIMITS.items():
        given = getattr(section, f"per_{name[3:].lower()}")
        limit = Limit(*default) if given is None else Limit(given.max, given.window_seconds)
        out.append((name, limit))
    return out


def rule_for(section: RemediationView, fault: Fault) -> RemediationRuleView | None:
    """The first rule covering ``fault`` (rules in the policy's order)."""
    for rule in section.rules:
        if rule.event != fault.event:
            continue
        if rule.event == EventClass.XID and fault.xid not in rule.xids:
            continue
        if rule.event == EventClass.HEALTH_FAILING and fault.failures < rule.failures:
            continue
        return rule
    return None


def _what(fault: Fault) -> str:
    if fault.event == EventClass.XID:
        return f"XID {fault.xid}"
    if fault.event == EventClass.HEALTH_FAILING:
        return f"health check failing {fault.failures} times"
    return str(fault.event)


def decide(section: RemediationView, fault: Fault, ledger: Ledger, now: float) -> Decision | None:
    """The action for ``fault``; None when no rule covers it or the device is already out."""
    rule = rule_for(section, fault)
    if rule is None or fault.device in ledger.out:
        return None
    what = _what(fault)
    action = RemediationAction(rule.action)
    if action in (RemediationAction.TAINT, RemediationAction.HAND_TO_ADMIN):
        return Decision(action, f"{what}: policy says {action}", rule)
    back = ledger.returned.get(fault.device)
    if back is not None and now - back < section.backoff_seconds:
        return Decision(
            RemediationAction.HAND_TO_ADMIN,
            f"{what} {now - back:.0f} s after the device was put back (back-off "
            f"{section.backoff_seconds} s): left tainted for a person",
            rule,
            held=True,
        )
    if len(ledger.out) >= section.max_devices_out:
        return _held(
            rule,
            what,
            f"{len(ledger.out)} device(s) out of service already "
            f"(maxDevicesOut {section.max_devices_out})",
        )
    scopes = {"perDevice": {"device": fault.device}, "perNode": {"node": fault.node}}
    for name, limit in limits(section):
        if ledger.count(limit, now, **scopes.get(name, {})) >= limit.max:
            return _held(
                rule, what, f"{name} limit {limit.max} in {limit.window_seconds} s reached"
            )
    return Decision(action, f"{what}: {action}", rule)


def _held(rule: RemediationRuleView, what: str, why: str) -> Decision:
    return Decision(RemediationAction.TAINT, f"{what}: {rule.action} held back, {why}", rule, True)


def operation_for(
    decision: Decision, device: str, namespace: str, suffix: str
) -> dict[str, Any] | None:
    """The AcceleratorOperation that carries out ``decision`` (None: nothing to run, the
    device is tainted only)."""
    if decision.action == RemediationAction.DRAIN_AND_RESET:
        spec: dict[str, Any] = {"action": "Reset"}
    elif decision.action == RemediationAction.DRAIN_AND_POWER_CYCLE:
        spec = {"action": "Power", "power": {"state": "Cycle"}}
    else:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorOperation",
        "metadata": {
            "name": f"{OPERATION_PREFIX}{device}-{suffix}"[:253],
            "namespace": namespace,
            "labels": {"kubeacc.io/remediation": "true"},
            "annotations": {"kubeacc.io/remediation-reason": decision.reason[:1024]},
        },
        "spec": {**spec, "targets": [device], "drainFirst": True},
    }
