"""The life-cycle agent's reads of the API, without pydantic: they accept what the pydantic API
types accept and refuse, with the field named, what they refuse."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.crds.api import ConditionStatus
from kubeacc.crds.apiread import (
    accelerator_device,
    accelerator_status,
    operation_spec,
    operation_status,
    results_to_api,
)
from kubeacc.crds.apistatus import with_condition
from kubeacc.crds.schemastructs import SchemaViolation, to_api
from kubeacc.crds.status import set_condition
from kubeacc.crds.types import (
    AcceleratorOperationSpec,
    AcceleratorOperationStatus,
    AcceleratorStatus,
    TargetResult,
)
from kubeacc.model import ModelError
from tests.hosts import HostFactory, discover

SHA = "ab" * 32


@pytest.mark.parametrize(
    "spec",
    [
        {"action": "Reset", "targets": ["n-gpu-0"]},
        {"action": "Power", "targets": ["n-gpu-0"], "power": {"state": "Cycle"}},
        {"action": "Program", "targets": ["a"], "program": {"bitstream": "x.gbs", "sha256": SHA}},
        {"action": "Detach", "targets": ["a"], "detach": {"driver": "dfl-pci"}},
        {"action": "MigMode", "targetSelector": {"matchLabels": {"k": "v"}}, "migMode": {}}
        | {"migMode": {"enabled": True}},
        {"action": "Attach", "targets": ["a"], "drainFirst": True, "unknownField": 1},
    ],
)
def test_a_valid_spec_reads_as_the_pydantic_type_does(spec: dict[str, Any]) -> None:
    ours = operation_spec({"spec": spec})
    theirs = AcceleratorOperationSpec.model_validate(spec)
    assert ours.action == theirs.action
    assert ours.drain_first == theirs.drain_first
    assert ours.timeout_seconds == theirs.timeout_seconds
    assert (ours.power and ours.power.state) == (theirs.power and theirs.power.state)
    assert (ours.program and ours.program.sha256) == (theirs.program and theirs.program.sha256)
    assert ours.detach.driver == (theirs.detach.driver if theirs.detach else None)
    assert (ours.mig_mode and ours.mig_mode.enabled) == (
        theirs.mig_mode and theirs.mig_mode.enabled
    )


#: Malformed specs an old CRD would let through, and what the refusal names.
MALFORMED = [
    (None, "spec: Expected `object`, got `null`"),
    ({"targets": ["a"]}, "spec: Object missing required field `action`"),
    ({"action": "Explode", "targets": ["a"]}, "spec.action: Invalid enum value 'Explode'"),
    ({"action": 3, "targets": ["a"]}, "spec.action: Expected `str`, got `int`"),
    ({"action": "Power", "targets": ["a"], "power": {"state": "Sideways"}}, "spec.power.state"),
    (
        {"action": "Power", "targets": ["a"], "power": "On"},
        "spec.power: Expected `object | null`, got `str`",
    ),
    ({"action": "Reset", "targets": "a"}, "spec.targets: Expected `array`, got `str`"),
    (
        {"action": "Program", "targets": ["a"], "program": {"bitstream": "../x", "sha256": SHA}},
        "spec.program.bitstream: Expected `str` matching regex",
    ),
    (
        {"action": "MigMode", "targets": ["a"], "migMode": {"enabled": 1.5}},
        "spec.migMode.enabled: Expected `bool`, got `float`",
    ),
    # the node joins it into /sys/bus/pci/drivers/<driver>/bind (issue 43)
    (
        {"action": "Detach", "targets": ["a"], "detach": {"driver": "../../../x"}},
        "spec.detach.driver: Expected `str` matching regex",
    ),
]
#: What pydantic coerced ("60" for 60, "yes" for true) and the API server's schema refuses:
#: refused here too, as the API server would.
STRICTER = [
    ({"action": "Reset", "targets": ["a"], "timeoutSeconds": "60"}, "spec.timeoutSeconds"),
    ({"action": "MigMode", "targets": ["a"], "migMode": {"enabled": "yes"}}, "migMode.enabled"),
]


@pytest.mark.parametrize(("spec", "message"), MALFORMED)
def test_a_malformed_spec_is_refused_naming_the_field(spec: Any, message: str) -> None:
    with pytest.raises(SchemaViolation) as caught:
        operation_spec({"spec": spec})
    assert str(caught.value).startswith("AcceleratorOperation ")
    assert message in str(caught.value)
    with pytest.raises(ValueError):  # the pydantic type refused it as well
        AcceleratorOperationSpec.model_validate(spec)


@pytest.mark.parametrize(("spec", "message"), STRICTER)
def test_what_pydantic_coerced_is_refused_as_the_api_server_refuses_it(
    spec: Any, message: str
) -> None:
    with pytest.raises(SchemaViolation) as caught:
        operation_spec({"spec": spec})
    assert message in str(caught.value)


def test_an_operation_status_reads_as_the_pydantic_type_does() -> None:
    status = {
        "phase": "Running",
        "dispatch": [{"accelerator": "n-a", "node": "n", "deviceName": "a"}],
        "results": [{"accelerator": "n-a", "node": "n", "phase": "Failed", "reason": "X"}],
    }
    ours = operation_status({"status": status})
    theirs = AcceleratorOperationStatus.model_validate(status)
    assert ours.phase == theirs.phase
    assert [(d.accelerator, d.node, d.device_name) for d in ours.dispatch] == [
        (d.accelerator, d.node, d.device_name) for d in theirs.dispatch
    ]
    assert results_to_api(
        [{"accelerator": "n-a", "node": "n", "phase": "Failed", "reason": "X"}]
    ) == [r.to_api() for r in theirs.results]
    with pytest.raises(SchemaViolation, match=r"status\.dispatch\[0\]: Object missing"):
        operation_status({"status": {"phase": "Running", "dispatch": [{"node": "n"}]}})
    assert operation_status({}).phase is None


def test_results_are_written_as_the_pydantic_type_writes_them() -> None:
    result = {
        "accelerator": "n-a",
        "node": "n",
        "phase": "Succeeded",
        "reason": "Attached",
        "message": "bound",
        "afuId": None,
        "driver": "vfio-pci",
        "finishedAt": "2026-01-01T00:00:00Z",
    }
    assert results_to_api([result]) == [TargetResult.model_validate(result).to_api()]
    with pytest.raises(SchemaViolation, match=r"status\.results\[0\]\.phase"):
        results_to_api([{**result, "phase": "Done"}])


def test_an_accelerator_status_and_its_device(hosts: HostFactory) -> None:
    device = discover(hosts.pristine("dgx-h100")).devices[0].to_json_dict()
    status = {
        "device": device,
        "hostDriver": "nvidia",
        "allocatedTo": [{"kind": "ResourceClaim", "namespace": "ns", "name": "c"}],
        "conditions": [
            {"type": "Present", "status": "True", "reason": "Discovered", "lastTransitionTime": "t"}
        ],
    }
    theirs = AcceleratorStatus.model_validate(status)
    ours = accelerator_status({"status": status})
    assert ours.host_driver == theirs.host_driver
    assert [c.name for c in ours.allocated_to] == [c.name for c in theirs.allocated_to]
    assert [c.type for c in ours.conditions] == ["Present"]
    assert accelerator_device({"status": status}) == theirs.device
    assert accelerator_device(None) is None and accelerator_status(None).conditions == []
    with pytest.raises(ModelError):
        accelerator_device({"status": {"device": {**device, "type": "tpu"}}})
    with pytest.raises(SchemaViolation, match=r"status\.allocatedTo\[0\]"):
        accelerator_status({"status": {"allocatedTo": [{"kind": "Pod"}]}})


def test_a_condition_is_set_as_the_controllers_helper_sets_it() -> None:
    start = [
        {
            "type": "Present",
            "status": "True",
            "reason": "A",
            "message": "",
            "lastTransitionTime": "t0",
        }
    ]
    ours = with_condition(start, "Present", True, "B", "m")
    theirs = set_condition(
        operation_status({"status": {"conditions": start}}).conditions, "Present", True, "B", "m"
    )
    assert ours == to_api(theirs)
    assert ours[0]["lastTransitionTime"] == "t0"  # same status: the time stays
    moved = with_condition(ours, "Present", False, "Gone")
    assert moved[0]["status"] == "False" and moved[0]["lastTransitionTime"] != "t0"
    added = with_condition(moved, "Healthy", ConditionStatus.UNKNOWN, "Unknown")
    assert [c["type"] for c in added] == ["Present", "Healthy"]
