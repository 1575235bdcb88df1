"""Helpers shared by the controller and the agents: timestamps, conditions, Events, matching."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from kubeacc.crds.types import (
    AcceleratorPolicySpec,
    Condition,
    ConditionStatus,
    PolicySelector,
)
from kubeacc.model import Device

log = logging.getLogger(__name__)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[Condition]:
    """Return ``conditions`` with ``type_`` set; the transition time moves only on a change."""
    st = status if isinstance(status, ConditionStatus) else ConditionStatus(str(status))
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        when = c.last_transition_time if c.status == st else now()
        out.append(
            Condition(
                type=type_,
                status=st,
                reason=reason,
                message=message,
                last_transition_time=when,
                observed_generation=generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_,
                status=st,
                reason=reason,
                message=message,
                last_transition_time=now(),
                observed_generation=generation,
            )
        )
    return out


def get_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def selector_matches(selector: PolicySelector, device: Device) -> bool:
    """True when a policy selector covers ``device`` (empty lists match everything)."""
    if selector.types and device.type not in selector.types:
        return False
    if selector.vendors and device.vendor not in selector.vendors:
        return False
    return not selector.models or device.model in selector.models


def allowed_bitstream_digests(policies: Iterable[Mapping[str, Any]], device: Device) -> set[str]:
    """SHA-256 digests that the AcceleratorPolicies selecting ``device`` allow on it."""
    allowed: set[str] = set()
    for pol in policies:
        spec = AcceleratorPolicySpec.model_validate(pol.get("spec") or {})
        if selector_matches(spec.selector, device):
            allowed |= {b.sha256 for b in spec.allowed_bitstreams}
    return allowed


def emit_event(
    client: Client,
    obj: dict[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool = False,
    component: str = "kubeacc-controller",
) -> None:
    """Record a core/v1 Event about ``obj``; failures are logged, never raised."""
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    stamp = dt.datetime.now(dt.UTC)
    event = Event(
        metadata=ObjectMeta(generateName=f"{meta.get('name', 'kubeacc')}.", namespace=namespace),
        involvedObject=ObjectReference(
            apiVersion=obj.get("apiVersion"),
            kind=obj.get("kind"),
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            uid=meta.get("uid"),
            resourceVersion=meta.get("resourceVersion"),
        ),
        reason=reason,
        message=message[:1024],
        type="Warning" if warning else "Normal",
        source=EventSource(component=component),
        firstTimestamp=stamp,
        lastTimestamp=stamp,
        count=1,
        reportingComponent=component,
    )
    try:
        client.create(event, namespace=namespace)
    except ApiError as exc:
        log.warning("event %s on %s not recorded: %s", reason, meta.get("name"), exc)
