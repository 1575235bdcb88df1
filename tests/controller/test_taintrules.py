"""Drain by eviction: the DeviceTaintRule of a drained device, and where spec.evict is allowed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubeacc.controller.taintrules import DRAIN_TAINT, rule, rule_name
from kubeacc.crds.types import AcceleratorOperationSpec


def test_the_rule_selects_exactly_the_device_of_its_node() -> None:
    r = rule("node-a-gpu-0000-1b-00-0", "node-a", "gpu-0000-1b-00-0", "team/drain")
    assert r["metadata"]["name"] == "kubeacc-drain-node-a-gpu-0000-1b-00-0"
    assert r["metadata"]["annotations"] == {"kubeacc.io/operation": "team/drain"}
    assert r["spec"] == {
        "deviceSelector": {"driver": "kubeacc.io", "pool": "node-a", "device": "gpu-0000-1b-00-0"},
        "taint": {"key": DRAIN_TAINT, "value": "team.drain", "effect": "NoExecute"},
    }
    assert len(rule_name("x" * 300)) == 253


def test_evict_goes_with_a_drain_only() -> None:
    AcceleratorOperationSpec.model_validate({"action": "Drain", "targets": ["a"], "evict": True})
    AcceleratorOperationSpec.model_validate(
        {"action": "Reset", "targets": ["a"], "drainFirst": True, "evict": True}
    )
    with pytest.raises(ValidationError, match="evict is only allowed"):
        AcceleratorOperationSpec.model_validate(
            {"action": "Reset", "targets": ["a"], "evict": True}
        )
