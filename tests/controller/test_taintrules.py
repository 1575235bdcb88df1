"""Drain by eviction: the DeviceTaintRule of a drained device, and where spec.evict is allowed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubeacc.controller.taintrules import (
    DRAIN_TAINT,
    derived,
    device_names_changed,
    missing,
    rule,
    rule_name,
    slice_names,
)
from kubeacc.crds.controlread import InvalidSpec, operation_spec
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


def _controller_reads(spec: dict[str, Any]) -> Any:
    return operation_spec({"spec": spec})


def _cli_reads(spec: dict[str, Any]) -> Any:
    return AcceleratorOperationSpec.model_validate(spec)


#: What refuses a spec in each: the controller's schema Structs and rules, the pydantic types.
READERS = [(_controller_reads, InvalidSpec), (_cli_reads, ValidationError)]


@pytest.mark.parametrize(("read", "error"), READERS)
def test_evict_goes_with_a_drain_only(read: Any, error: type[Exception]) -> None:
    assert read({"action": "Drain", "targets": ["a"], "evict": True}).evict
    assert read({"action": "Reset", "targets": ["a"], "drainFirst": True, "evict": True}).evict
    with pytest.raises(error, match=r"spec\.evict is only allowed for action Drain"):
        read({"action": "Reset", "targets": ["a"], "evict": True})


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


def _slice(pool: str, *names: str, driver: str = "kubeacc.io") -> dict[str, Any]:
    """A slice as the controller's watch cache keeps it."""
    return slice_names(_whole(pool, *names, driver=driver))


def _whole(pool: str, *names: str, driver: str = "kubeacc.io") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pool}-slice", "resourceVersion": "7", "labels": {"a": "b"}},
        "spec": {
            "driver": driver,
            "pool": {"name": pool},
            "devices": [{"name": n, "attributes": {}} for n in names],
        },
    }


def test_a_partition_or_vf_that_appears_during_a_drain_gets_its_rule() -> None:
    gpu, nic = "gpu-0000-1b-00-0", "nic-0000-5e-00-0"
    rules = [
        rule(f"n-{gpu}", "n", gpu, "team/drain"),
        rule(f"n-{gpu}", "n", f"{gpu}-mig-1g-10gb-0", "team/drain", "mig-1g-10gb-0"),
        rule(f"n-{nic}", "n", nic, "ops/nic"),
    ]
    slices = [
        _slice("n", gpu, f"{gpu}-mig-1g-10gb-0", f"{gpu}-mig-1g-10gb-1", "gpu-0000-2c-00-0"),
        _slice("n", f"{nic}-vf0"),  # another slice of the same pool
        _slice("m", f"{gpu}-mig-1g-10gb-5"),  # the same device name on another node
        _slice("n", f"{nic}-vf1", driver="other.example.com"),  # another driver's
    ]
    made = missing(rules, slices)
    assert [(r["metadata"]["name"], r["spec"]["deviceSelector"]) for r in made] == [
        (
            f"kubeacc-drain-n-{gpu}-mig-1g-10gb-1",
            {"driver": "kubeacc.io", "pool": "n", "device": f"{gpu}-mig-1g-10gb-1"},
        ),
        (
            f"kubeacc-drain-n-{nic}-vf0",
            {"driver": "kubeacc.io", "pool": "n", "device": f"{nic}-vf0"},
        ),
    ]
    # the new rules carry their drain's operation and Accelerator, so Uncordon deletes them
    assert made[1]["metadata"]["annotations"] == {
        "kubeacc.io/operation": "ops/nic",
        "kubeacc.io/accelerator": f"n-{nic}",
    }
    assert made[1]["spec"]["taint"]["value"] == "ops.nic"
    assert missing([*rules, *made], slices) == []  # once made, nothing more
    assert missing([], slices) == []  # no drain in force: no rule
    # a partition's rule alone (its device's rule gone) makes nothing
    assert missing(rules[1:2], slices) == []


def test_the_slice_watch_keeps_the_names_and_wakes_only_when_they_change() -> None:
    whole = _whole("n", "gpu-0", "gpu-0-mig-1g-10gb-0")
    a = slice_names(whole)
    assert a == {
        "metadata": {"name": "n-slice", "resourceVersion": "7"},
        "driver": "kubeacc.io",
        "pool": "n",
        "names": ("gpu-0", "gpu-0-mig-1g-10gb-0"),
    }
    whole["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    tainted = slice_names(whole)
    assert not device_names_changed(a, tainted)
    assert device_names_changed(
        a, _slice("n", "gpu-0", "gpu-0-mig-1g-10gb-0", "gpu-0-mig-1g-10gb-1")
    )
    assert device_names_changed(None, a) and device_names_changed(a, None)
