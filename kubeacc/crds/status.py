"""Conditions on the pydantic API types, for the controller; with the helpers on API dicts
(:mod:`kubeacc.crds.apistatus`, which the node daemons use) named here as well."""

from __future__ import annotations

from kubeacc.crds.apistatus import apply_operation_status, now, parse_time
from kubeacc.crds.types import Condition, ConditionStatus

__all__ = ["apply_operation_status", "get_condition", "now", "parse_time", "set_condition"]


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
