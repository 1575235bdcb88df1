"""The runtime cost limit against kube-scheduler's allocator, selector by selector.

Each selector runs on one device in both the allocator (the Go harness) and the engine, which
counts cel-go's cost while the selector runs (kubeacc.engine.celcount). The corpus is
cost-heavy: nested ``all``/``exists``/``map``/``filter`` over ``lists.range(n)`` and device
attributes, string functions by size, short-circuits inside loops, just under and just over
the limit. Where the evaluator's fixed cap of 10,000 comprehension iterations stops a
selector, the engine runs it again in kube-scheduler's own CEL built as a library (tools/celgo,
docs/placement.md, "Long comprehensions"): those selectors are listed apart, and without the
library the engine's error must say that it could not evaluate them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.differential.harness import GoAllocator
from kubeacc.engine import celgo
from kubeacc.engine.celcount import ITERATION_CAP
from kubeacc.engine.engine import Engine
from tests.differential.test_renamed_cel import _both, _scenario

A = 'device.attributes["gpu.example.com"]'
LONG = "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"


def _lists(k: int) -> str:
    """A list literal of k list literals that are not constant (10 + 11 k a time)."""
    return "[" + ", ".join(["[i]"] * k) + "]"


#: selectors within the iteration cap: the verdicts (fits, does not, error) must be equal
AGREES = (
    # stop early: cost far under the static worst case
    "lists.range(400).all(i, lists.range(400).all(j, j < i || i == 0))",
    "lists.range(9000).exists(i, lists.range(9000).exists(j, i + j == 1))",
    "lists.range(60).all(i, lists.range(60).exists(j, j == i) && lists.range(60).all(j, j >= 0))",
    f'{A}.model == "a100" || lists.range(8000).all(i, lists.range(8000).all(j, j >= 0))',
    f'{A}.model == "h100" && lists.range(8000).all(i, lists.range(8000).all(j, j >= 0))',
    # just under and just over the limit
    f"lists.range(8690).all(i, {_lists(9)}.size() == 9)",
    f"lists.range(8700).all(i, {_lists(9)}.size() == 9)",
    f"lists.range(9000).all(i, {_lists(9)}.size() == 9) || true",
    "lists.range(1395).all(i, lists.range(i).size() == i)",
    "lists.range(1396).all(i, lists.range(i).size() == i)",
    "lists.range(76900).map(i, i * 2).size() > 0",
    "lists.range(100000).map(i, i * 2).size() > 0",
    "lists.range(90).all(i, lists.range(90).all(j, [i, j].size() == 2))",
    "lists.range(50).all(i, lists.range(50).filter(j, j < i).size() <= i)",
    "lists.range(2000).map(i, i * 2).size() > 0",
    "lists.range(2000).filter(i, i % 2 == 0).size() > 0",
    # strings by size, ternaries, short-circuits, sets
    f'lists.range(9000).all(i, "{LONG}".contains("{LONG[::-1]}") == false)',
    f'lists.range(9000).all(i, {A}.model.startsWith("a") || {A}.model.contains("{"z" * 30}"))',
    f'lists.range(9000).exists(i, {A}.model.matches("^[a-z]+[0-9]+x$"))',
    f"lists.range(9000).all(i, i < 0 ? {A}.numa > 0 : {A}.index >= 0)",
    "lists.range(9000).exists_one(i, i == 7)",
    "lists.range(3000).all(i, i in lists.range(100))",
    f'lists.range(3000).all(i, x, x + i >= 0 && "{"y" * 40}" + "{"z" * 40}" != "")',
    f'{A}.all(k, lists.range(300).all(j, j >= 0 && k != ""))',
)

#: selectors past the evaluator's iteration cap: the engine runs them again in kube-scheduler's
#: own CEL (kubeacc.engine.celgo), so verdicts are equal; without that library the engine says
#: that it could not evaluate them (kube-scheduler runs the first five, refuses the last
#: for cost)
CAPPED = (
    "lists.range(20000).all(i, i >= 0)",
    "lists.range(300).all(i, lists.range(300).all(j, i + j >= 0))",
    "lists.range(20000).all(i, i < 15000)",
    f'lists.range(20000).exists(i, i == 19999 && {A}.model == "a100")',
    f'lists.range(12000).exists(i, {A}.model == "h100")',
    "lists.range(1200).all(i, lists.range(1200).all(j, i + j >= 0))",
)


@pytest.mark.parametrize("expression", CAPPED)
def test_long_comprehension_as_in_the_allocator(
    go_allocator: GoAllocator, celgo_library: Path, expression: str
) -> None:
    theirs, ours = _both(go_allocator, expression)
    assert ours == theirs, expression
    # the scheduler runs all but the last, which it cancels for cost
    assert (theirs == "error") == (expression == CAPPED[-1]), expression


@pytest.mark.parametrize("expression", CAPPED[:1])
def test_long_comprehension_without_the_library(
    go_allocator: GoAllocator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, expression: str
) -> None:
    theirs = go_allocator.pairs(_scenario(expression))[0][0]
    assert theirs["ok"] and not theirs.get("fatal"), f"the allocator refuses {expression!r}"
    monkeypatch.setenv(celgo.LIBRARY_ENV, str(tmp_path / celgo.LIBRARY))
    scen = _scenario(expression)
    engine = Engine(
        scen["slices"],
        scen["classes"],
        scen["allocated"],
        scen["nodes"],
        release=go_allocator.release,
    )
    placed = engine.allocate_pod(scen["claims"], node="n0", commit=False, pod="p")
    assert "could not be evaluated" in str(placed.error)
    assert f"{ITERATION_CAP:,} comprehension iterations" in str(placed.error)
    assert "python -m kubeacc.differential.build celgo" in str(placed.error)
