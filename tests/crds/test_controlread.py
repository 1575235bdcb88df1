"""The controller's reads without pydantic (kubeacc/crds/controlread.py): they refuse what the
pydantic API types refuse, the CRDs' rules between fields included (kubeacc/crds/rules.py), and
name every wrong field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubeacc.controller.remediation import limits
from kubeacc.crds.controlread import InvalidSpec, operation_spec, policy_spec
from kubeacc.crds.remediation import Remediation
from kubeacc.crds.schemastructs import SchemaViolation
from kubeacc.crds.types import AcceleratorOperationSpec, AcceleratorPolicySpec

TARGETS = {"targets": ["n-gpu-0"]}
SELECTOR = {"targetSelector": {"matchLabels": {"kubeacc.io/node": "n"}}}

#: Specs the API server's CEL rules refuse -> what the controller says instead.
BROKEN_RULES = [
    ({"action": "Reset"}, "exactly one of spec.targets and spec.targetSelector"),
    ({"action": "Reset", **TARGETS, **SELECTOR}, "exactly one of spec.targets"),
    ({"action": "Reset", **TARGETS, "evict": True}, "spec.evict is only allowed"),
    ({"action": "Power", **SELECTOR, "power": {"state": "On"}, "evict": True}, "spec.evict"),
]
#: Specs both readers take.
GOOD = [
    {"action": "Reset", **TARGETS},
    {"action": "Reset", **SELECTOR},
    {"action": "Drain", **TARGETS, "evict": True},
    {"action": "Reset", **TARGETS, "drainFirst": True, "evict": True},
    {"action": "Reset", **TARGETS, "evict": False},
]


@pytest.mark.parametrize(("spec", "message"), BROKEN_RULES)
def test_the_rules_between_fields_refuse_as_the_pydantic_types_do(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidSpec) as got:
        operation_spec({"spec": spec})
    assert got.value.problems == [str(got.value)] and message in str(got.value)
    with pytest.raises(ValidationError, match=message):
        AcceleratorOperationSpec.model_validate(spec)


@pytest.mark.parametrize("spec", GOOD)
def test_a_spec_within_the_rules_is_read(spec: dict[str, Any]) -> None:
    ours = operation_spec({"spec": spec})
    theirs = AcceleratorOperationSpec.model_validate(spec)
    assert (ours.action, bool(ours.targets), ours.evict) == (
        theirs.action,
        bool(theirs.targets),
        theirs.evict,
    )


def test_every_wrong_field_is_named() -> None:
    spec = {"targets": [1], "power": {"state": 1}, "timeoutSeconds": 0}
    with pytest.raises(InvalidSpec) as got:
        operation_spec({"spec": spec})
    assert got.value.problems == [
        "spec: Object missing required field `action`",
        "spec.targets[0]: Expected `str`, got `int`",
        "spec.power.state: Expected `str`, got `int`",
        "spec.timeoutSeconds: Expected `int` >= 1",
    ]
    with pytest.raises(InvalidSpec, match=r"^spec: Expected `object`, got `array`$"):
        operation_spec({"spec": [1]})


@pytest.mark.parametrize(
    ("name", "refused"),
    [("kubeacc.io/gpu", False), ("kubernetes.io/gpu", True), ("x.kubernetes.io/gpu", True)],
)
def test_a_policy_names_no_kubernetes_io_resource(name: str, refused: bool) -> None:
    spec = {"deviceClass": {"extendedResourceName": name}}
    if not refused:
        assert policy_spec({"spec": spec}).device_class.extended_resource_name == name
        AcceleratorPolicySpec.model_validate(spec)
        return
    with pytest.raises(SchemaViolation, match=r"extendedResourceName: .* kubernetes\.io domain"):
        policy_spec({"spec": spec})
    with pytest.raises(ValidationError, match=r"kubernetes\.io domain"):
        AcceleratorPolicySpec.model_validate(spec)


@pytest.mark.parametrize(
    "section",
    [
        {"rules": [{"event": "FallenOffBus", "action": "DrainAndReset"}]},
        {
            "rules": [{"event": "FallenOffBus", "action": "DrainAndReset"}],
            "perNode": {"max": 5},
            "perFleet": {"max": 7, "windowSeconds": 600},
        },
    ],
)
def test_rate_limits_left_out_are_the_pydantic_defaults(section: dict[str, Any]) -> None:
    """The schema has no defaults for them; the controller fills in the pydantic types'."""
    ours = policy_spec({"spec": {"remediation": section}}).remediation
    assert limits(ours) == limits(Remediation.model_validate(section))
    assert dict(limits(ours))["perDevice"].window_seconds == 86400
