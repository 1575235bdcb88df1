"""Helpers shared by the controller and the agents: timestamps, conditions, Events, matching."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from lightkube import Client
from lightkube.types import PatchType

from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import AcceleratorOperation, as_dict
from kubeacc.crds.types import Condition, ConditionStatus

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
