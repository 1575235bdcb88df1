"""The CEL functions the engine reaches through renamed calls agree with the real allocator.

Each selector runs on one device in both kube-scheduler's allocator (the Go harness) and the
engine: both must fit, both must not, or both must fail the pod with an error. The selectors
that evaluate must evaluate in the allocator too (not fail), so a refusal on both sides cannot
pass for agreement.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.engine.engine import Engine

A = 'device.attributes["gpu.example.com"]'

#: selectors both sides evaluate (true or false), by feature
EVALUATES = (
    "1 < 2.0",
    "2u >= 1.5",
    "-1 < 1u",
    "1.0 > 2",
    f"{A}.numa <= 1u && -1 < 0.5",
    f"{A}.index > 0.5 || 2u > 3.0",
    f'string(ip({A}.addr)) == "10.1.2.3"',
    'string(ip("2001:db8::1:0:0:1")) == "2001:db8::1:0:0:1"',
    f'string(cidr({A}.addr + "/16")) == "10.1.2.3/16"',
    f'string(cidr({A}.addr + "/16").masked()) == "10.1.0.0/16"',
    f'string({A}.numa) == "1"',
    "[1, 2, 2].indexOf(2) == 1",
    "[1, 2, 2].lastIndexOf(2) == 2",
    "[1.0].indexOf(1.1) == -1",
    f"[1.0].indexOf({A}.numa) == 0",
    f'["t4", "a100"].indexOf({A}.model) == 1',
    '[quantity("1"), quantity("1000m")].lastIndexOf(quantity("1")) == 1',
    "[[1], [2]].indexOf([2]) == 1",
    "[true, false].indexOf(false) == 1",
    f'{A}.model.indexOf("1") == 1',
    "[1, 2].transformMap(i, v, v * 2) == {0: 2, 1: 4}",
    '{"a": 1, "b": 2}.transformMap(k, v, v > 1, v + 1) == {"b": 3}',
    '{"a": 1, "b": 2}.transformMapEntry(k, v, {k + "x": v}) == {"ax": 1, "bx": 2}',
    f'{A}.transformMap(k, v, k != "index", k).size() == 3',
    '[quantity("1")].transformMap(i, q, q.add(1))[0] == quantity("2")',
    f"[{A}.model].transformMapEntry(i, m, {{m: i}}).size() == 1",
)

#: selectors both sides refuse, at compile or run time
FAILS = (
    "[1.0].indexOf(1) == 0",
    '[1].indexOf("a") == 0',
    'string(ip("::ffff:1.2.3.4")) == ""',
    '{"a": 1, "b": 2}.transformMapEntry(k, v, {"z": v}).size() == 1',
    "[1, 1].transformMapEntry(i, v, {v: i}).size() == 1",
    'kubeacc_string(1) == "1"',
)


def _scenario(expression: str) -> dict[str, Any]:
    scen, _ = scenario(0)
    attrs = {
        "model": {"string": "a100"},
        "numa": {"int": 1},
        "index": {"int": 0},
        "addr": {"string": "10.1.2.3"},
    }
    scen["slices"] = [
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n0",
                "devices": [{"name": "dev-0", "attributes": attrs}],
            },
        }
    ]
    scen["allocated"] = []
    scen["nodes"] = scen["nodes"][:1]
    exact = {
        "deviceClassName": "gpu",
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": expression}}],
    }
    scen["claims"] = [
        {
            "metadata": {"name": "c", "namespace": "default", "uid": "c"},
            "spec": {"devices": {"requests": [{"name": "r0", "exactly": exact}]}},
        }
    ]
    scen["pods"] = [[0]]
    return scen


def _both(go: GoAllocator, expression: str) -> tuple[object, object]:
    scen = _scenario(expression)
    theirs = go.pairs(scen)[0][0]
    engine = Engine(
        scen["slices"], scen["classes"], scen["allocated"], scen["nodes"], release=go.release
    )
    ours = engine.allocate_pod(scen["claims"], node="n0", commit=False, pod="p")
    return (
        "error" if theirs.get("fatal") else bool(theirs["ok"]),
        "error" if ours.error is not None else ours.ok,
    )


@pytest.mark.parametrize("expression", EVALUATES)
def test_selector_evaluates_as_in_the_allocator(go_allocator: GoAllocator, expression: str) -> None:
    theirs, ours = _both(go_allocator, expression)
    assert theirs != "error", f"the allocator fails {expression!r}"
    assert ours == theirs, expression


@pytest.mark.parametrize("expression", FAILS)
def test_selector_fails_as_in_the_allocator(go_allocator: GoAllocator, expression: str) -> None:
    theirs, ours = _both(go_allocator, expression)
    assert theirs == "error", f"the allocator accepts {expression!r}"
    assert ours == "error", expression
