"""A policy's DeviceClass: the extended resource it may be asked for by."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubeacc.controller.policies import SPEC_HASH_ANNOTATION, device_class
from kubeacc.crds.schemastructs import SchemaViolation
from kubeacc.crds.types import AcceleratorPolicySpec


def _policy(device_class_template: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "h100", "uid": "u"},
        "spec": {
            "selector": {"types": ["gpu"], "models": ["NVIDIA H100 80GB HBM3"]},
            "deviceClass": device_class_template,
        },
    }


def test_a_policy_class_names_its_extended_resource() -> None:
    cls = device_class(_policy({"extendedResourceName": "kubeacc.io/gpu-h100-80gb-hbm3"}))
    assert cls["spec"]["extendedResourceName"] == "kubeacc.io/gpu-h100-80gb-hbm3"
    plain = device_class(_policy({}))
    assert "extendedResourceName" not in plain["spec"]
    # a changed name is a changed spec: the controller re-applies the class
    assert (
        cls["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        != plain["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )


REFUSED = [
    ("gpu", "pattern"),
    ("kubeacc.io/", "pattern"),
    ("Kubeacc.io/gpu", "pattern"),
    ("kubernetes.io/gpu", "kubernetes.io domain"),
    ("x.kubernetes.io/gpu", "kubernetes.io domain"),
]
#: How each reader words a refused pattern.
_PATTERN = {"controller": "matching regex", "cli": "should match pattern"}


@pytest.mark.parametrize(("name", "why"), REFUSED)
def test_a_name_kubernetes_would_refuse_is_refused(name: str, why: str) -> None:
    """By the controller (its class is not made) with the field named, and by the pydantic
    types the CLI uses."""
    with pytest.raises(SchemaViolation) as controller:
        device_class(_policy({"extendedResourceName": name}))
    assert "spec.deviceClass.extendedResourceName: " in str(controller.value)
    assert (_PATTERN["controller"] if why == "pattern" else why) in str(controller.value)
    with pytest.raises(ValidationError) as cli:
        AcceleratorPolicySpec.model_validate({"deviceClass": {"extendedResourceName": name}})
    assert (_PATTERN["cli"] if why == "pattern" else why) in str(cli.value)
