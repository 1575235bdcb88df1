"""Answers shared between claims equal but for selectors that pick the same devices."""

from __future__ import annotations

from typing import Any

from kubeacc.engine.engine import Engine
from kubeacc.engine.verdictkey import shareable_reasons, without_selectors
from tests.engine.helpers import claim, device_class, devices_of, exactly, gpu, slice_

M = 'device.attributes["kubeacc.io"].model'


def _cluster(nodes: int = 6) -> Engine:
    slices = [
        slice_(
            f"n{i}",
            [
                gpu("gpu-0", model="h100", root="pci0000:10"),
                gpu("gpu-1", model="a100", root="pci0000:10"),
                gpu("gpu-2", model="h100", root="pci0000:20"),
                gpu("gpu-3", model="a100", root="pci0000:20"),
            ],
        )
        for i in range(nodes)
    ]
    nodes_ = [{"metadata": {"name": f"n{i}", "labels": {}}} for i in range(nodes)]
    return Engine(slices, [device_class()], nodes=nodes_, max_feasible_nodes=2)


def _claim(name: str, selector: str, count: int = 1) -> dict[str, Any]:
    return claim(exactly(count=count, selectors=[selector]), name=name)


def _searches(eng: Engine) -> list[str]:
    """Records the nodes the engine really searches (not answered from memory)."""
    seen: list[str] = []
    search = eng._search

    def counting(c: Any, n: Any, pools: Any) -> Any:
        seen.append(n.name)
        return search(c, n, pools)

    eng._search = counting  # type: ignore[method-assign]
    return seen


def test_without_selectors_keeps_everything_else() -> None:
    spec = {"requests": [{"name": "r", "exactly": {"count": 2, "selectors": [{"cel": {}}] * 3}}]}
    assert without_selectors(spec) == {
        "requests": [{"name": "r", "exactly": {"count": 2, "selectors": 3}}]
    }


def test_same_verdicts_reuse_the_answer_and_agree_with_a_fresh_engine() -> None:
    eng = _cluster()
    searched = _searches(eng)
    first = eng.allocate(_claim("a", f'{M} == "h100"'), commit=False)
    assert first.ok and searched
    searched.clear()
    other = _claim("b", f'{M} == "h100" && {M} != "m7"')  # other words, the same devices
    start = eng._start
    second = eng.allocate(other, commit=False)
    assert second.ok and searched == []
    engine = _cluster()
    engine._start = start  # the same nodes in the same rotation, nothing remembered
    fresh = engine.allocate(other, commit=False)
    assert (second.node, devices_of(second.allocation or {})) == (
        fresh.node,
        devices_of(fresh.allocation or {}),
    )


def test_other_verdicts_search_again() -> None:
    eng = _cluster()
    eng.allocate(_claim("a", f'{M} == "h100"'), commit=False)
    searched = _searches(eng)
    p = eng.allocate(_claim("b", f'{M} == "a100"'), commit=False)
    assert searched and p.ok
    assert devices_of(p.allocation or {}) == ["gpu-1"]


def test_a_no_that_quotes_the_selector_is_not_shared() -> None:
    eng = _cluster(2)
    first = eng.allocate(_claim("a", f'{M} == "t4"', count=1), commit=False)
    second = eng.allocate(_claim("b", f'{M} == "v100" || {M} == "t4"', count=1), commit=False)
    assert not first.ok and not second.ok
    text = "\n".join(second.explanation.lines() if second.explanation else [])
    assert '"v100"' in text  # its own selector, not the first claim's


def test_a_failing_selector_is_reported_not_shared() -> None:
    eng = _cluster(2)
    assert eng.allocate(_claim("a", f'{M} == "h100"'), commit=False).ok
    failing = eng.allocate(_claim("b", f'{M} == "h100" && {M}.size() > 1 / 0'), commit=False)
    assert not failing.ok and failing.error is not None and "divide by zero" in failing.error


def test_shareable_reasons() -> None:
    assert shareable_reasons(["matchAttribute x: no common value among candidates (a x1)"])
    assert not shareable_reasons(["request gpus: pass selector 'x' 0 of 4"])
    assert not shareable_reasons(["claim default/c: needs 3 devices"])
