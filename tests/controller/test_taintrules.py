"""Drain by eviction: the DeviceTaintRule of a drained device, and where spec.evict is allowed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubeacc.controller.taintrules import DRAIN_TAINT, derived, rule, rule_name
from kubeacc.crds.types import AcceleratorOperationSpec


def test_the_rule_selects_exactly_the_device_of_its_node() -> None:
    r = rule("node-a-gpu-0000-1b-00-0", "node-a", "gpu-0000-1b-00-0", "team/drain")
    assert r["metadata"]["name"] == "kubeacc-drain-node-a-gpu-0000-1b-00-0"
    assert r["metadata"]["annotations"] == {
        "kubeacc.io/operation": "team/drain",
        "kubeacc.io/accelerator": "node-a-gpu-0000-1b-00-0",
    }
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


def test_a_gpus_partitions_and_a_nics_vfs_get_rules_of_their_own() -> None:
    names = [
        "gpu-0000-1b-00-0",
        "gpu-0000-1b-00-0-mig-1g-10gb-2",
        "gpu-0000-1b-00-0-mig-3g-40gb-0",
        "gpu-0000-1b-00-01",  # another device whose name only starts alike
        "gpu-0000-1b-00-01-mig-1g-10gb-0",
        "nic-0000-5e-00-0-vf0",
        "nic-0000-5e-00-0-vf12",
        "nic-0000-5e-00-0-vfx",
    ]
    assert derived("gpu-0000-1b-00-0", names) == [
        "gpu-0000-1b-00-0-mig-1g-10gb-2",
        "gpu-0000-1b-00-0-mig-3g-40gb-0",
    ]
    assert derived("nic-0000-5e-00-0", names) == ["nic-0000-5e-00-0-vf0", "nic-0000-5e-00-0-vf12"]
    r = rule("n-nic-0000-5e-00-0", "n", "nic-0000-5e-00-0-vf12", "team/drain", "vf12")
    assert r["metadata"]["name"] == "kubeacc-drain-n-nic-0000-5e-00-0-vf12"
    assert r["metadata"]["annotations"]["kubeacc.io/accelerator"] == "n-nic-0000-5e-00-0"
    assert r["spec"]["deviceSelector"]["device"] == "nic-0000-5e-00-0-vf12"
