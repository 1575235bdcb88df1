"""Status helpers on API dicts: timestamps, a condition set, the operation-status write.

No pydantic here: the life-cycle agent, a daemon on every node, uses them
(:mod:`kubeacc.crds.status` adds the helpers on the schema Structs for the controller).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from lightkube import Client
from lightkube.types import PatchType

from kubeacc.crds.api import API_VERSION, ConditionStatus
from kubeacc.crds.resources import AcceleratorOperation, as_dict


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def with_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str = "",
) -> list[dict[str, Any]]:
    """``conditions`` (API dicts) with ``type_`` set; the transition time moves only when the
    status changes."""
    st = str(ConditionStatus(str(status)))
    old = next((c for c in conditions if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == st else None
    new = {
        "type": type_,
        "status": st,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now(),
    }
    if old is None:
        return [*conditions, new]
    return [new if c is old else c for c in conditions]


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
