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
from lightkube.types import PatchType

from kubeacc.crds.resources import AcceleratorOperation, as_dict
from kubeacc.crds.types import (
    API_VERSION,
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
    old = get_condition(conditions, type_)
    new = Condition(
        type=type_,
        status=st,
        reason=reason,
        message=message,
        last_transition_time=old.last_transition_time if old and old.status == st else now(),
        observed_generation=generation,
    )
    if old is None:
        return [*conditions, new]
    return [new if c.type == type_ else c for c in conditions]


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
    """Record a core/v1 Event about ``obj``, and log it under ``component``'s name: the events
    are what a component did.

    Failures to record are logged, never raised.
    """
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    ref = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
    logging.getLogger(component).log(
        logging.WARNING if warning else logging.INFO,
        "%s %s: %s: %s",
        obj.get("kind", "object"),
        ref,
        reason,
        message,
    )
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


def apply_operation_status(
    client: Client, op: Mapping[str, Any], status: dict[str, Any], field_manager: str
) -> dict[str, Any]:
    """Server-side apply the ``status`` fields this manager owns on an AcceleratorOperation.

    The controller owns phase and conditions, each node agent its results; SSA keeps them apart.
    Returns the operation as the API server stored it.
    """
    meta = op["metadata"]
    written = client.patch(
        AcceleratorOperation.Status,
        meta["name"],
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": status,
        },
        namespace=meta["namespace"],
        patch_type=PatchType.APPLY,
        field_manager=field_manager,
        force=True,
    )
    return as_dict(written)
