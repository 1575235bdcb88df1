"""A policy's DeviceClass: the extended resource it may be asked for by."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubeacc.controller.policies import SPEC_HASH_ANNOTATION, device_class
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


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("gpu", "should match pattern"),
        ("kubeacc.io/", "should match pattern"),
        ("Kubeacc.io/gpu", "should match pattern"),
        ("kubernetes.io/gpu", "kubernetes.io domain"),
        ("x.kubernetes.io/gpu", "kubernetes.io domain"),
    ],
)
def test_a_name_kubernetes_would_refuse_is_refused(name: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        AcceleratorPolicySpec.model_validate({"deviceClass": {"extendedResourceName": name}})
