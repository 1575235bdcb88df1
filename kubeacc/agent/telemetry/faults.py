"""Faults in the telemetry: what changed for the worse between two samples of a node.

The remediation policy (kubeacc.crds.remediation, docs/lifecycle.md "Remediation") acts on
event classes; this turns the sampler's readings into those: a new XID event
(``xid_errors`` grew), more uncorrectable ECC errors, a device that stopped answering
(``up`` 1 -> 0: for an NVIDIA GPU, ``GPU_IS_LOST``, fallen off the bus), an FPGA port error
register turned non-zero, a NIC link that lost carrier. Only changes count: a fault is
reported once, when it appears, not at every sample while it lasts.

``HealthFailing`` counts the consecutive passes in which discovery's health check finds a
device unhealthy; it is reported when the count reaches a ``failures`` threshold that some
policy's rule names (the thresholds come with each pass), so a device that stays unhealthy
costs one write per threshold, not one per pass, and none when no policy asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from kubeacc.agent.telemetry.series import Reading
from kubeacc.crds.api import EventClass


@dataclass(frozen=True)
class DeviceFault:
    device: str
    event: EventClass
    xid: int | None = None
    detail: str = ""
    #: HealthFailing: consecutive failed health checks.
    failures: int = 1


Key = tuple[str, str, tuple[str, ...]]


class FaultDetector:
    """Compares each sample with the one before (module docstring)."""

    def __init__(self) -> None:
        self._last: dict[Key, float] | None = None
        #: device -> consecutive passes found unhealthy
        self._failing: dict[str, int] = {}
        #: device -> the thresholds already reported in its current run of failures
        self._told: dict[str, set[int]] = {}

    def health(self, unhealthy: Mapping[str, str], thresholds: Set[int]) -> list[DeviceFault]:
        """One health check pass: ``unhealthy`` maps each device found unhealthy to the
        reason; a device whose count of consecutive failures has reached a threshold not yet
        reported in this run of failures gets a ``HealthFailing`` fault with its count (so a
        policy that arrives late still hears of a device failing for longer). A healthy pass
        starts the count again."""
        self._failing = {d: self._failing.get(d, 0) + 1 for d in unhealthy}
        self._told = {d: self._told.get(d, set()) for d in unhealthy}
        faults = []
        for d, n in sorted(self._failing.items()):
            reached = {t for t in thresholds if t <= n} - self._told[d]
            if reached:
                self._told[d] |= reached
                faults.append(
                    DeviceFault(d, EventClass.HEALTH_FAILING, detail=unhealthy[d], failures=n)
                )
        return faults

    def update(self, readings: list[Reading]) -> list[DeviceFault]:
        now = {(r.metric, r.device, r.labels): r.value for r in readings}
        last, self._last = self._last, now
        if last is None:
            # First sample: only what is already wrong (a device down, a port in error, a link
            # without carrier); ECC counts survive driver reloads, so they are a baseline.
            last = {k: _baseline(k[0], v) for k, v in now.items()}
        faults: list[DeviceFault] = []
        for (metric, device, labels), value in sorted(now.items()):
            before = last.get((metric, device, labels))
            if metric == "xid_errors" and value > (before or 0):
                faults.append(DeviceFault(device, EventClass.XID, int(labels[0])))
            elif metric == "ecc_errors" and labels == ("uncorrected",) and value > (before or 0):
                faults.append(
                    DeviceFault(device, EventClass.ECC_UNCORRECTABLE, detail=f"{value:.0f}")
                )
            elif metric == "up" and value == 0 and before != 0:
                faults.append(DeviceFault(device, EventClass.FALLEN_OFF_BUS))
            elif metric == "port_errors" and value != 0 and before == 0:
                detail = f"{labels[0]}: {int(value):#x}"
                faults.append(DeviceFault(device, EventClass.FPGA_PORT_ERROR, detail=detail))
            elif metric == "link_up" and value == 0 and before != 0:
                faults.append(DeviceFault(device, EventClass.LINK_DOWN, detail=labels[0]))
        return faults


def _baseline(metric: str, value: float) -> float:
    if metric in ("up", "link_up"):
        return 1.0
    if metric == "ecc_errors":
        return value
    return 0.0
