"""The pydantic API types refuse what the CRD's rules refuse (the controller parses with them)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubeacc.crds.manifests import crds
from kubeacc.crds.types import AcceleratorOperationSpec, AcceleratorOperationStatus

SELECTOR = {"matchLabels": {"kubeacc.io/type": "gpu"}}


@pytest.mark.parametrize(
    "spec",
    [
        {"action": "Reset"},
        {"action": "Reset", "targets": ["a"], "targetSelector": SELECTOR},
        {"action": "Reset", "targetSelector": {"matchLabels": {}}},
        {"action": "Reset", "targetSelector": {**SELECTOR, "maxTargets": 0}},
        {"action": "Reset", "targetSelector": {**SELECTOR, "maxTargets": 65}},
        {"action": "Reset", "targetSelector": {"matchLabels": {"kubeacc.io/model": "A B"}}},
        {"action": "Reset", "targets": []},
    ],
)
def test_bad_targets_are_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AcceleratorOperationSpec.model_validate(spec)


def test_selector_defaults_to_one_target() -> None:
    spec = AcceleratorOperationSpec.model_validate({"action": "Reset", "targetSelector": SELECTOR})
    assert spec.targets is None
    assert spec.target_selector is not None and spec.target_selector.max_targets == 1
    assert spec.to_api()["targetSelector"] == {**SELECTOR, "maxTargets": 1}


def test_status_targets_round_trip() -> None:
    status = AcceleratorOperationStatus.model_validate({"targets": ["n-gpu-0000-01-00-0"]})
    assert status.to_api()["targets"] == ["n-gpu-0000-01-00-0"]


def test_crd_has_the_selector_schema_and_rule() -> None:
    op = next(c for c in crds() if c["spec"]["names"]["kind"] == "AcceleratorOperation")
    version = op["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = {r["rule"]: r["message"] for r in spec["x-kubernetes-validations"]}
    assert rules["has(self.targets) != has(self.targetSelector)"].startswith("exactly one of")
    assert "targets" not in spec.get("required", [])
    sel = spec["properties"]["targetSelector"]
    assert sel["required"] == ["matchLabels"]
    labels = sel["properties"]["matchLabels"]
    assert (labels["minProperties"], labels["maxProperties"]) == (1, 16)
    assert labels["additionalProperties"]["maxLength"] == 63
    assert sel["properties"]["maxTargets"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 64,
        "default": 1,
        "description": "At most this many targets",
    }
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Targets"] == ".status.targets"
