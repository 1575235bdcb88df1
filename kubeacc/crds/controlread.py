"""What the controller reads of kube-acc objects and writes back, without pydantic: the schema
Structs of :mod:`kubeacc.crds.schemastructs` (as the node daemons read them,
:mod:`kubeacc.crds.apiread`), plus the checks between fields that the CRDs make in CEL
(:mod:`kubeacc.crds.rules`), for objects an old CRD let in without them.

Attributes are the schema's names in snake case, enumerations plain strings equal to the
:mod:`kubeacc.crds.api` enums.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from kubeacc.crds.apiread import accelerator_device, accelerator_status, operation_status
from kubeacc.crds.policyread import policy_spec as schema_policy_spec
from kubeacc.crds.rules import extended_resource_problem, operation_spec_problem
from kubeacc.crds.schemastructs import SchemaViolation, problems, validate
from kubeacc.crds.views import (
    AcceleratorSpecView,
    DispatchView,
    OperationSpecView,
    PolicySpecView,
    PolicyStatusView,
)

__all__ = [
    "InvalidSpec",
    "accelerator_device",
    "accelerator_spec",
    "accelerator_status",
    "dispatch_entries",
    "operation_spec",
    "operation_status",
    "policy_spec",
    "policy_status",
]


class InvalidSpec(SchemaViolation):
    """An operation's spec that the CRD would refuse; ``problems``: each wrong field, named."""

    def __init__(self, found: list[str]) -> None:
        super().__init__("; ".join(found))
        self.problems = found


def operation_spec(op: Mapping[str, Any]) -> OperationSpecView:
    """An AcceleratorOperation's ``spec``; raises :class:`InvalidSpec` naming every field the
    schema refuses or, for a spec the schema takes, the first rule between fields it breaks."""
    data = op.get("spec") or {}
    try:
        spec = cast(OperationSpecView, validate("AcceleratorOperation", "spec", data))
    except SchemaViolation:
        raise InvalidSpec(problems("AcceleratorOperation", "spec", data)) from None
    rule = operation_spec_problem(spec)
    if rule is not None:
        raise InvalidSpec([rule])  # it names its fields
    return spec


def accelerator_spec(acc: Mapping[str, Any]) -> AcceleratorSpecView:
    return cast(AcceleratorSpecView, validate("Accelerator", "spec", acc.get("spec") or {}))


def policy_spec(policy: Mapping[str, Any]) -> PolicySpecView:
    """An AcceleratorPolicy's ``spec``; raises :class:`SchemaViolation` naming the field."""
    spec = schema_policy_spec(policy)
    problem = extended_resource_problem(spec.device_class.extended_resource_name)
    if problem is not None:
        where = "AcceleratorPolicy spec.deviceClass.extendedResourceName"
        raise SchemaViolation(f"{where}: {problem}")
    return spec


def policy_status(data: Mapping[str, Any]) -> PolicyStatusView:
    """An AcceleratorPolicy's ``status`` from its API form (``{}``: an empty one)."""
    return cast(PolicyStatusView, validate("AcceleratorPolicy", "status", dict(data)))


def dispatch_entries(entries: Iterable[Mapping[str, Any]]) -> list[DispatchView]:
    """``status.dispatch`` of an operation from its API form, checked."""
    out = validate("AcceleratorOperation", "status.dispatch", [dict(e) for e in entries])
    assert isinstance(out, list)
    return cast(list[DispatchView], out)
