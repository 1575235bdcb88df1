"""What a pass needs of each Accelerator is worked out once per resourceVersion: the same facts
while the version and the policies stand, new ones when either changes, none for an
Accelerator that is gone."""

from __future__ import annotations

from typing import Any

from kubeacc.controller.views import ParsedAccelerators
from kubeacc.crds.types import AcceleratorPolicySpec
from kubeacc.model import Device, DeviceType, HealthState
from kubeacc.model.accelerator import Health


def _acc(name: str, version: str, cordoned: bool, kind: str = "gpu") -> dict[str, Any]:
    dev = Device(
        name=name,
        type=DeviceType(kind),
        vendor="nvidia",
        model="H100",
        index=0,
        source="test",
        health=Health(state=HealthState.UNHEALTHY, reason="Xid 79"),
    )
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {"node": "n", "deviceName": name, "cordoned": cordoned},
        "status": {"device": dev.to_json_dict()},
    }


GPUS = {"gpus": AcceleratorPolicySpec.model_validate({"selector": {"types": ["gpu"]}})}


def test_facts_are_kept_while_the_version_and_the_policies_stand() -> None:
    parsed = ParsedAccelerators()
    first = parsed.facts({"a": _acc("a", "1", False), "b": _acc("b", "2", False)}, GPUS)
    assert first["a"].covering == ("gpus",) and not first["a"].cordoned
    assert first["a"].health is not None and first["a"].health.reason == "Xid 79"
    again = parsed.facts({"a": _acc("a", "1", False), "b": _acc("b", "3", True)}, GPUS)
    assert again["a"] is first["a"]
    assert again["b"] is not first["b"] and again["b"].cordoned
    assert set(parsed.facts({"b": _acc("b", "3", True)}, GPUS)) == {"b"}
    assert parsed.facts({"a": _acc("a", "1", True)}, GPUS)["a"].cordoned  # "a" was forgotten


def test_a_policy_change_works_everything_out_again() -> None:
    parsed = ParsedAccelerators()
    acc = {"a": _acc("a", "1", False)}
    assert parsed.facts(acc, GPUS)["a"].covering == ("gpus",)
    fpgas = {"gpus": AcceleratorPolicySpec.model_validate({"selector": {"types": ["fpga"]}})}
    assert parsed.facts(acc, fpgas)["a"].covering == ()


def test_an_object_without_a_version_is_parsed_every_time() -> None:
    parsed = ParsedAccelerators()
    bare = {"metadata": {"name": "a"}, "spec": {"node": "n", "deviceName": "a"}, "status": {}}
    first = parsed.facts({"a": bare}, {})
    assert first["a"].health is None and first["a"].covering == ()
    assert parsed.facts({"a": bare}, {})["a"] is not first["a"]
