"""The ``remediation`` section of an ``AcceleratorPolicy``: what the controller does when one of
the policy's devices reports a fault (docs/remediation.md).

Each rule maps an event class -- an XID (with the codes it covers), an uncorrectable ECC
error, a device fallen off the bus, an FPGA port error, a NIC link down, a health check
failing ``failures`` times in a row -- to an action: taint the device only, drain it and reset
it, drain it and power-cycle it, or hand it to an admin (tainted, with an Event saying why).
Limits bound how much the controller takes out of service on its own: per device, per node
and per fleet within a window, a maximum of devices out at once, and a back-off: a device that
fails again within ``backoffSeconds`` of being put back stays tainted for a person.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kubeacc.crds.api import (
    REMEDIATION_CONDITION,
    REMEDIATION_LIMITS,
    EventClass,
    RemediationAction,
)


def _rules(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )


#: The Accelerator condition the remediation loop keeps (also :mod:`kubeacc.crds.api`'s).
CONDITION_TYPE = REMEDIATION_CONDITION
__all__ = ["CONDITION_TYPE", "RateLimit", "Remediation", "RemediationAction", "RemediationRule"]


class RemediationRule(_Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.event == 'Xid' ? has(self.xids) && size(self.xids) > 0 : "
                "!has(self.xids) || size(self.xids) == 0",
                "event Xid needs a non-empty xids, and xids is only valid with it",
            ),
            (
                "self.event == 'HealthFailing' || !has(self.failures) || self.failures == 1",
                "failures is only valid with event HealthFailing",
            ),
        )
    )

    event: EventClass
    xids: list[Annotated[int, Field(ge=1, le=999)]] = Field(
        default_factory=list,
        max_length=64,
        description="Event Xid: the XID codes this rule covers (e.g. 48, 63, 64, 74, 79, 94, 95)",
    )
    failures: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Event HealthFailing: consecutive failed health checks before acting",
    )
    action: RemediationAction


class RateLimit(_Model):
    max: int = Field(ge=0, le=10000, description="Remediations started at most (0: none)")
    window_seconds: int = Field(default=3600, ge=60, le=30 * 86400)


def _limit(name: str) -> Any:
    n, seconds = REMEDIATION_LIMITS[name]
    return Field(default_factory=lambda: RateLimit(max=n, window_seconds=seconds))


class Remediation(_Model):
    rules: list[RemediationRule] = Field(min_length=1, max_length=32)
    per_device: RateLimit = _limit("perDevice")
    per_node: RateLimit = _limit("perNode")
    per_fleet: RateLimit = _limit("perFleet")
    max_devices_out: int = Field(
        default=1,
        ge=0,
        le=10000,
        description="Devices this policy's remediation keeps out of service at once, fleet-wide",
    )
    backoff_seconds: int = Field(
        default=86400,
        ge=0,
        le=30 * 86400,
        description="A device failing again this soon after it was put back stays tainted for "
        "a person",
    )
