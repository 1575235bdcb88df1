"""DeviceTaintRules applied to slices as kube-scheduler's slice tracker applies them."""

from __future__ import annotations

import copy
from typing import Any

from kubeacc.engine.taintrules import apply_taint_rules
from tests.engine.helpers import node_gpus, slice_

NO_SCHEDULE = {"key": "k", "value": "v", "effect": "NoSchedule"}


def _rule(selector: dict[str, Any] | None, taint: dict[str, Any] = NO_SCHEDULE) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": taint}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"kind": "DeviceTaintRule", "metadata": {"name": "r"}, "spec": spec}


def _tainted(slices: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [
        (d["name"], len(d.get("taints") or []))
        for s in slices
        for d in s["spec"]["devices"]
        if d.get("taints")
    ]


def test_selector_fields_narrow_the_devices() -> None:
    s = slice_("a", node_gpus(3))
    driver, pool = s["spec"]["driver"], s["spec"]["pool"]["name"]
    first = s["spec"]["devices"][0]["name"]
    assert len(_tainted(apply_taint_rules([s], [_rule({})]))) == 3
    assert len(_tainted(apply_taint_rules([s], [_rule({"driver": driver, "pool": pool})]))) == 3
    assert _tainted(apply_taint_rules([s], [_rule({"device": first})])) == [(first, 1)]
    assert _tainted(apply_taint_rules([s], [_rule({"driver": "other.example.com"})])) == []
    assert _tainted(apply_taint_rules([s], [_rule({"pool": "other"})])) == []


def test_a_rule_without_selector_matches_nothing() -> None:
    s = slice_("a", node_gpus(2))
    assert apply_taint_rules([s], [_rule(None)]) == [s]


def test_taints_are_appended_and_the_input_is_untouched() -> None:
    s = slice_("a", node_gpus(1))
    s["spec"]["devices"][0]["taints"] = [{"key": "own", "effect": "NoExecute"}]
    before = copy.deepcopy(s)
    out = apply_taint_rules([s], [_rule({}), _rule({}, {"key": "x", "effect": "None"})])
    assert [t["key"] for t in out[0]["spec"]["devices"][0]["taints"]] == ["own", "k", "x"]
    assert s == before
