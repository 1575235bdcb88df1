"""The checks between fields that the controller makes itself, without pydantic.

The API server enforces them as CEL rules of the CRDs; an object let in by an old CRD, without
the rules, is checked here. The pydantic types (:mod:`kubeacc.crds.types`) call the same
functions from their validators, and the schema Structs (:mod:`kubeacc.crds.schemastructs`) of
the controller's readers (:mod:`kubeacc.crds.controlread`) after their schema check. Each
function takes either (the attribute names are the same) and returns what is wrong, or None.
"""

from __future__ import annotations

from kubeacc.crds.api import Action
from kubeacc.crds.views import OperationSpecView


def operation_spec_problem(spec: OperationSpecView) -> str | None:
    """An AcceleratorOperation spec: exactly one way to name targets, and ``evict`` only with
    Drain or ``drainFirst``."""
    # An absent spec.targets is None in the pydantic type and [] in the Struct; a present one
    # holds at least one name (minItems 1).
    if bool(spec.targets) == (spec.target_selector is not None):
        return "exactly one of spec.targets and spec.targetSelector is required"
    if spec.evict and not (spec.action == Action.DRAIN or spec.drain_first):
        return "spec.evict is only allowed for action Drain or with spec.drainFirst"
    return None


def extended_resource_problem(name: str | None) -> str | None:
    """An AcceleratorPolicy's ``spec.deviceClass.extendedResourceName``: never in a
    kubernetes.io domain."""
    if name is not None and "kubernetes.io/" in name:
        return f"extendedResourceName {name!r} is in a kubernetes.io domain"
    return None
