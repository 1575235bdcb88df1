"""Device health as ResourceSlice taints (DRADeviceTaints): what a fault does to a device's users.

The telemetry's faults (:mod:`kubeacc.agent.telemetry.faults`) map to a taint effect, per event
class and, for NVIDIA GPUs, per XID (:func:`effect_of`):

* ``NoExecute`` -- the device is lost or its memory is corrupt (XID 48, 64, 74, 79, 95, 119, 120,
  uncorrectable ECC, fallen off the bus, an FPGA port error): nothing new is allocated and the
  kube-controller-manager's device-taint eviction deletes the pods whose claims hold it;
* ``NoSchedule`` -- it needs a reset before new work (XID 94, a contained ECC error) or it lost
  its network link: running pods stay, nothing new is allocated;
* ``None`` -- degraded but usable (XID 63, a row remapped; XID 92, a high single-bit ECC rate):
  still allocated, the taint tells the scheduler's users and ``kubectl get resourceslices`` why.

The taint is ``kubeacc.io/health=<why>`` on the device and on its MIG partitions and SR-IOV
virtual functions. It is lifted ``hold`` seconds after the device's last fault once the device
answers again (``up``), has its link (``link_up``) and no FPGA port error left. Flapping is
damped: a device that faults again within ``flap_window`` of being lifted is held twice as long
as the time before (up to ``max_hold``); a quiet ``flap_window`` brings the hold back to ``hold``.

A stronger fault on a tainted device raises the effect; a weaker one only extends the hold.

Device-plugin types have no slices to taint: the device plugin advertises a device with a
``NoSchedule`` or ``NoExecute`` health taint ``Unhealthy`` in ListAndWatch
(:func:`plugin_unhealthy`), so the kubelet gives it to no new pod; it evicts nobody for an
Unhealthy device, so there ``NoExecute`` acts as ``NoSchedule``, and ``None`` leaves the device
Healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from kubeacc.contracts.names import HEALTH_TAINT, belongs_to
from kubeacc.crds.api import EventClass

if TYPE_CHECKING:  # the telemetry loads them when it samples, after the agent registered
    from kubeacc.agent.telemetry.faults import DeviceFault
    from kubeacc.agent.telemetry.series import Reading


class Effect(StrEnum):
    """``resource.k8s.io/v1`` DeviceTaintEffect values, weakest first."""

    NONE = "None"
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


_RANK = {Effect.NONE: 0, Effect.NO_SCHEDULE: 1, Effect.NO_EXECUTE: 2}

#: NVIDIA XIDs by what they leave of the GPU (other XIDs are the application's own faults).
XID_EFFECTS: Mapping[int, Effect] = {
    48: Effect.NO_EXECUTE,  # double-bit ECC error
    64: Effect.NO_EXECUTE,  # row remapping / page retirement failed
    74: Effect.NO_EXECUTE,  # NVLink error
    79: Effect.NO_EXECUTE,  # fallen off the bus
    95: Effect.NO_EXECUTE,  # uncontained ECC error
    119: Effect.NO_EXECUTE,  # GSP RPC timeout
    120: Effect.NO_EXECUTE,  # GSP error
    94: Effect.NO_SCHEDULE,  # contained ECC error: the GPU needs a reset
    63: Effect.NONE,  # a row remapped (page retired): degraded, usable
    92: Effect.NONE,  # high single-bit ECC error rate: degraded, usable
}

#: Event classes other than XIDs.
CLASS_EFFECTS: Mapping[EventClass, Effect] = {
    EventClass.ECC_UNCORRECTABLE: Effect.NO_EXECUTE,
    EventClass.FALLEN_OFF_BUS: Effect.NO_EXECUTE,
    EventClass.FPGA_PORT_ERROR: Effect.NO_EXECUTE,
    EventClass.LINK_DOWN: Effect.NO_SCHEDULE,
}


def effect_of(fault: DeviceFault) -> Effect | None:
    """The taint effect of ``fault``; None: it says nothing about the device."""
    if fault.event is EventClass.XID:
        return XID_EFFECTS.get(fault.xid) if fault.xid is not None else None
    return CLASS_EFFECTS.get(fault.event)


def reason_of(fault: DeviceFault) -> str:
    """The taint's value (a label value): ``xid-79``, ``fallen-off-bus``, ..."""
    if fault.event is EventClass.XID:
        return f"xid-{fault.xid}"
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in str(fault.event)).lstrip("-")


@dataclass
class _State:
    effect: Effect | None = None  # None: not tainted now
    reason: str = ""
    last_fault: float = 0.0
    hold: float = 0.0
    lifted_at: float | None = None


@dataclass(frozen=True)
class Change:
    """One step of one device: ``added`` (tainted), ``raised`` (a stronger effect),
    ``lifted``; ``hold``: the seconds it is held at least (longer than the base: damped)."""

    device: str
    step: str
    effect: Effect
    reason: str
    hold: float
    damped: bool = False


class HealthTaints:
    """The node's health taints (module docstring); fed by the telemetry at every pass."""

    def __init__(
        self, hold: float = 300.0, flap_window: float | None = None, max_hold: float | None = None
    ) -> None:
        if hold <= 0:
            raise ValueError("the health-taint hold must be positive")
        self.hold = hold
        self.flap_window = flap_window if flap_window is not None else 10 * hold
        self.max_hold = max_hold if max_hold is not None else 16 * hold
        self._states: dict[str, _State] = {}

    def update(
        self, faults: Iterable[DeviceFault], readings: Iterable[Reading], now: float
    ) -> list[Change]:
        """Apply one pass's new faults and the devices' level readings; the steps taken."""
        changes: list[Change] = []
        for f in faults:
            effect = effect_of(f)
            if effect is not None:
                changes.extend(self._fault(f.device, effect, reason_of(f), now))
        bad = _still_bad(readings)
        for device, s in sorted(self._states.items()):
            if s.effect is None or device in bad or now - s.last_fault < s.hold:
                continue
            changes.append(Change(device, "lifted", s.effect, s.reason, s.hold))
            s.effect, s.lifted_at = None, now
        return changes

    def _fault(self, device: str, effect: Effect, reason: str, now: float) -> list[Change]:
        s = self._states.setdefault(device, _State(hold=self.hold))
        s.last_fault = now
        if s.effect is not None:
            if _RANK[effect] <= _RANK[s.effect]:
                return []  # the hold is extended, the taint stays
            s.effect, s.reason = effect, reason
            return [Change(device, "raised", effect, reason, s.hold, s.hold > self.hold)]
        if s.lifted_at is not None and now - s.lifted_at < self.flap_window:
            s.hold = min(s.hold * 2, self.max_hold)
        else:
            s.hold = self.hold
        s.effect, s.reason = effect, reason
        return [Change(device, "added", effect, reason, s.hold, s.hold > self.hold)]

    def taints(self) -> dict[str, dict[str, str]]:
        """Device name -> its health taint, for the devices tainted now."""
        return {
            d: {"key": HEALTH_TAINT, "value": s.reason, "effect": str(s.effect)}
            for d, s in sorted(self._states.items())
            if s.effect is not None
        }

    def forget(self, present: Iterable[str]) -> None:
        """Drop the state of devices no longer on the node."""
        keep = set(present)
        for d in [d for d in self._states if d not in keep]:
            del self._states[d]


def _still_bad(readings: Iterable[Reading]) -> set[str]:
    """Devices whose level readings say the fault is still there."""
    bad: set[str] = set()
    for r in readings:
        if (r.metric in ("up", "link_up") and r.value == 0) or (
            r.metric == "port_errors" and r.value != 0
        ):
            bad.add(r.device)
    return bad


def with_health_taints(
    entries: list[dict[str, Any]], taints: Mapping[str, dict[str, str]]
) -> list[dict[str, Any]]:
    """Slice entries with each tainted device's health taint added (to its partitions too)."""
    if not taints:
        return entries
    out = []
    for e in entries:
        add = [t for d, t in taints.items() if belongs_to(str(e["name"]), d)]
        out.append({**e, "taints": [*e.get("taints", []), *add]} if add else e)
    return out


def plugin_unhealthy(taints: Mapping[str, dict[str, str]]) -> dict[str, str]:
    """Device -> why, for the devices the device plugin serves Unhealthy for their health
    taint (``NoSchedule`` and ``NoExecute``; a degraded ``None`` device stays Healthy)."""
    return {
        d: f"health taint {t['value']} ({t['effect']})"
        for d, t in taints.items()
        if t["effect"] != Effect.NONE.value
    }
