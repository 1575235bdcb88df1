"""A malformed AcceleratorOperation that an old CRD lets in is failed by the controller with
``InvalidSpec`` naming the field, once, with a Warning Event; the other operations go on.

Before, the controller's validation raised on every pass (every 0.3 s here) for such an
operation, which stayed without a phase and filled the controller's log. The test starts its
own testbed and installs the AcceleratorOperation CRD with a ``spec`` that takes anything.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import pytest
from lightkube.resources.core_v1 import Event

from kubeacc.crds.resources import as_dict
from tests.crdfixtures import (
    create_operation_eventually,
    make_controller,
    operation_finished,
    permissive_operations,
    running,
    wait_for,
)

NS = "ops"
TARGET = "node-m-gpu-0000-01-00-0"  # no such Accelerator

#: Operation name -> (spec, the reason it fails with, a part of its message).
CASES: dict[str, tuple[Any, str, str]] = {
    "unknown-action": (
        {"action": "Explode", "targets": [TARGET]},
        "InvalidSpec",
        "spec.action: Invalid enum value 'Explode'",
    ),
    "wrong-type": (
        {"action": "Power", "targets": [TARGET], "power": {"state": 1}},
        "InvalidSpec",
        "spec.power.state: Expected `str`, got `int`",
    ),
    "missing-action": (
        {"targets": [TARGET]},
        "InvalidSpec",
        "spec: Object missing required field `action`",
    ),
    # every wrong field is named, up to three
    "four-wrong": (
        {"action": "Explode", "targets": [1], "power": {"state": 1}, "timeoutSeconds": 0},
        "InvalidSpec",
        "spec.action: Invalid enum value 'Explode'; spec.targets[0]: Expected `str`, got `int`; "
        "spec.power.state: Expected `str`, got `int` (and 1 more)",
    ),
    # the CRD's rules between fields, checked by the controller itself (kubeacc/crds/rules.py)
    "both-targets": (
        {"action": "Reset", "targets": [TARGET], "targetSelector": {"matchLabels": {"rack": "r7"}}},
        "InvalidSpec",
        "exactly one of spec.targets and spec.targetSelector is required",
    ),
    "no-targets": (
        {"action": "Reset"},
        "InvalidSpec",
        "exactly one of spec.targets and spec.targetSelector is required",
    ),
    "evict-reset": (
        {"action": "Reset", "targets": [TARGET], "evict": True},
        "InvalidSpec",
        "spec.evict is only allowed for action Drain or with spec.drainFirst",
    ),
    # well formed: validated as before, and refused for its own reason
    "good": ({"action": "Reset", "targets": [TARGET]}, "AcceleratorNotFound", TARGET),
}


def _failed(op: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in op["status"]["conditions"] if c["type"] == "Failed")


@pytest.mark.cluster
def test_malformed_operations_fail_with_the_field_named() -> None:
    with permissive_operations(NS) as (tb, client):
        for name, (spec, _, _) in CASES.items():
            create_operation_eventually(client, NS, name, spec)
        with running(make_controller(tb)):
            got = {
                name: wait_for(f"{name} finished", partial(operation_finished, client, NS, name))
                for name in CASES
            }
            time.sleep(1)  # a few more passes: nothing more is written or said
            events = [as_dict(e) for e in client.list(Event, namespace=NS)]
            again = {name: operation_finished(client, NS, name) for name in CASES}
    for name, (_, reason, message) in CASES.items():
        op = got[name]
        assert op["status"]["phase"] == "Failed", (name, op["status"])
        failed = _failed(op)
        assert failed["reason"] == reason and message in failed["message"], (name, failed)
        assert message in op["status"]["message"], (name, op["status"])
        mine = [e for e in events if e["involvedObject"]["name"] == name]
        assert [(e["type"], e["reason"], e.get("count", 1)) for e in mine] == [
            ("Warning", reason, 1)
        ], (name, mine)
        after = again[name]
        assert after is not None
        assert after["metadata"]["resourceVersion"] == op["metadata"]["resourceVersion"], name
