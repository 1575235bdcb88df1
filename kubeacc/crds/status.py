"""Conditions on the schema Structs (:mod:`kubeacc.crds.schemastructs`), for the controller;
with the helpers on API dicts (:mod:`kubeacc.crds.apistatus`) named here as well. No pydantic:
each kind's conditions are a ``metav1.Condition`` list of the same schema."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kubeacc.crds.api import ConditionStatus
from kubeacc.crds.apistatus import apply_operation_status, now, parse_time
from kubeacc.crds.schemastructs import validate
from kubeacc.crds.views import ConditionView

__all__ = [
    "apply_operation_status",
    "get_condition",
    "now",
    "parse_time",
    "set_condition",
]


def set_condition(
    conditions: Sequence[ConditionView],
    type_: str,
    status: bool | ConditionStatus,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[ConditionView]:
    """Return ``conditions`` with ``type_`` set; the transition time moves only on a change."""
    st = str(ConditionStatus(str(status)))
    old = get_condition(conditions, type_)
    api: dict[str, Any] = {
        "type": type_,
        "status": st,
        "reason": reason,
        "message": message,
        "lastTransitionTime": old.last_transition_time if old and old.status == st else now(),
    }
    if generation is not None:
        api["observedGeneration"] = generation
    (new,) = cast(list[ConditionView], validate("AcceleratorOperation", "status.conditions", [api]))
    if old is None:
        return [*conditions, new]
    return [new if c.type == type_ else c for c in conditions]


def get_condition(conditions: Sequence[ConditionView], type_: str) -> ConditionView | None:
    """The condition ``type_`` of ``conditions``, or None."""
    return next((c for c in conditions if c.type == type_), None)
