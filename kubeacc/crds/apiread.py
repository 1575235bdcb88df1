"""What the life-cycle agent reads of kube-acc objects from the API and writes back, checked
against the CRDs' own schemas without pydantic (:mod:`kubeacc.crds.schemastructs`).

Each reader returns a Struct whose attributes are the schema's names in snake case
(``spec.mig_mode.enabled``), its enumerations plain strings equal to the
:mod:`kubeacc.crds.api` enums, and raises :class:`~kubeacc.crds.schemastructs.SchemaViolation`
naming the field for an object the API server's schema would have refused (an old CRD, a
hand-edited status). The CEL rules between fields are the API server's and the controller's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from kubeacc.crds.schemastructs import to_api, validate
from kubeacc.crds.views import AcceleratorStatusView, OperationSpecView, OperationStatusView
from kubeacc.model import Device


def operation_spec(op: Mapping[str, Any]) -> OperationSpecView:
    return cast(OperationSpecView, validate("AcceleratorOperation", "spec", op.get("spec")))


def operation_status(op: Mapping[str, Any]) -> OperationStatusView:
    status = validate("AcceleratorOperation", "status", op.get("status") or {})
    return cast(OperationStatusView, status)


def accelerator_status(acc: Mapping[str, Any] | None) -> AcceleratorStatusView:
    """An Accelerator's status, but for ``device`` (:func:`accelerator_device` reads it)."""
    status = (acc or {}).get("status") or {}
    if isinstance(status, Mapping):
        status = {k: v for k, v in status.items() if k != "device"}
    return cast(AcceleratorStatusView, validate("Accelerator", "status", status))


def accelerator_device(acc: Mapping[str, Any] | None) -> Device | None:
    """The device an Accelerator's status shows (``ModelError`` if it is not one)."""
    raw = ((acc or {}).get("status") or {}).get("device")
    return None if raw is None else Device.from_json_dict(raw)


def results_to_api(results: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """An operation's ``status.results`` (API dicts) as the schema has them, checked."""
    out = to_api(validate("AcceleratorOperation", "status.results", list(results)))
    assert isinstance(out, list)
    return out
