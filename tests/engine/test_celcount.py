"""Counting kube-scheduler's runtime CEL cost while a selector runs (kubeacc.engine.celcount).

The expected costs are cel-go's actual costs for the same expressions (kube-scheduler 1.37's
allocator environment), each spelled out in the units the module's docstring lists.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kubeacc.engine import celcount, celenv
from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector
from kubeacc.engine.engine import Engine
from tests.engine.helpers import claim, device_class, exactly, node_gpus, slice_

A = 'device.attributes["gpu.example.com"]'
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
#: a list literal of ten list literals that are not constant: 10 + 10 x 11
ELEVEN_LISTS = "[" + ", ".join(["[i]"] * 10) + "]"
DEVICE: dict[str, Any] = {
    "driver": "gpu.example.com",
    "attributes": {"gpu.example.com": {"model": "a100", "numa": 1}},
    "capacity": {},
    "allowMultipleAllocations": False,
}


def _counted(expr: str) -> tuple[bool, int]:
    """(result, cost) of an expression rewritten to count, whatever its worst case."""
    program = celenv._check(expr)
    rewritten, outside, _ = celcount.rewrite(program.serialize(), always=True)
    counting = celenv.environment().deserialize(rewritten)
    act = DeviceEnv(DEVICE)._activation(compile_selector(expr))
    result, cost = celcount.evaluate(counting, act, outside)
    value: bool = result.value()
    return value, cost


@pytest.mark.parametrize(
    ("expr", "cost"),
    [
        # range 11 + 10, per element: condition 2 (@not_strictly_false, ident) + step 3, result 1
        ("lists.range(10).all(i, i >= 0)", 21 + 10 * 5 + 1),
        # exists: condition 3 (!), step 1 + false (0)
        ("[1, 2, 3, 4].exists(i, false)", 4 * 4 + 1),
        # && costs nothing of its own; both sides run
        ("[1, 2, 3, 4].all(i, i >= 0 && i >= 0)", 4 * 7 + 1),
        # || stops at a true left side: the right side is not charged
        ("[1, 2, 3, 4].all(i, i >= 0 || i >= 0)", 4 * 5 + 1),
        ("[1, 2, 3, 4].all(i, i < 0 || i >= 0)", 4 * 7 + 1),
        # map: condition true (0), step: acc 1 + [f] 10 + i 1 + `+` 1; result, size, == 3
        ("[1, 2, 3, 4].map(i, i).size() == 4", 4 * 13 + 3),
        # filter: the taken branch only; a branch that is an identifier costs nothing
        ("lists.range(3).filter(i, i > 0).size() == 2", 14 + 2 + 15 + 15 + 3),
        # string functions by size: contains on 26 x 26 characters = 3 * 3
        (
            f'[1, 2, 3, 4].all(i, "{ALPHABET}".contains("{ALPHABET}"))',
            4 * 12 + 1,
        ),
        # lists.range(i) costs 11 + i, charged when it runs
        ("lists.range(3).all(i, lists.range(i).size() >= 0)", 14 + 17 + 18 + 19 + 1),
        # an `in` over a constant list is a set lookup (0); over a built list, its size
        ("lists.range(3).all(i, i in [1, 2, 3])", 14 + 4 + 2 + 1),
        ("lists.range(3).all(i, i in [1, 2, 3, 4, 5 + 0])", 14 + 2 + 18 + 2 + 1),
        # a map literal 30 (a constant one 0)
        ('lists.range(5).map(i, {"a": i}).size() == 5', 16 + 5 * 43 + 3),
        ("lists.range(400).all(i, lists.range(400).all(j, j < i || i == 0))", 4460),
    ],
)
def test_counts_as_cel_go(expr: str, cost: int) -> None:
    assert _counted(expr)[1] == cost


def test_ordinary_selectors_run_as_compiled() -> None:
    """Small worst cases are not rewritten: no counting, no base cost."""
    for expr in (
        f'{A}.model == "a100"',
        f'["a100", "h100"].exists(m, m == {A}.model)',
        f'{A}.exists(k, k == "model")',
        "lists.range(100).all(i, i >= 0)",
    ):
        sel = compile_selector(expr)
        assert sel.base_cost is None, expr
        assert celcount.COST.encode() not in sel.program.serialize(), expr


def test_heavy_selectors_are_rewritten() -> None:
    sel = compile_selector("lists.range(5000).exists(i, lists.range(5000).exists(j, i + j == 1))")
    assert sel.base_cost is not None
    assert celcount.COST.encode() in sel.program.serialize()
    assert DeviceEnv(DEVICE).matches(sel) is True


@pytest.mark.parametrize(
    "expr",
    [
        # refused before the first iteration: 100,000 iterations of 13 cannot fit
        "lists.range(100000).map(i, i * 2).size() > 0",
        # over the limit inside the loop, under the iteration cap: 9,000 x 125
        f"lists.range(9000).all(i, {ELEVEN_LISTS}.size() == 10)",
        # an error absorbed by || still fails: the counter stays over the limit
        f"lists.range(9000).all(i, {ELEVEN_LISTS}.size() == 10) || true",
    ],
)
def test_cost_limit_is_a_runtime_error(expr: str) -> None:
    with pytest.raises(CelError, match="operation cancelled: actual cost limit exceeded"):
        DeviceEnv(DEVICE).matches(compile_selector(expr))


def test_iteration_cap_says_it_is_the_evaluators() -> None:
    """Cheap but long: cel-go runs it (120,012), this evaluator stops at 10,000 iterations."""
    with pytest.raises(CelError, match=r"could not be evaluated: .*limit of kube-acc's CEL"):
        DeviceEnv(DEVICE).matches(compile_selector("lists.range(20000).all(i, i >= 0)"))


def test_counter_is_per_thread() -> None:
    """Threads evaluating at once each count their own evaluation."""
    exprs = {
        "lists.range(3000).all(i, i >= 0)": 3011 + 3000 * 5 + 1,
        "lists.range(2000).exists(i, i < 0)": 2011 + 2000 * 6 + 1,
    }
    seen: dict[str, set[int]] = {e: set() for e in exprs}
    barrier = threading.Barrier(len(exprs))

    def run(expr: str) -> None:
        barrier.wait()
        for _ in range(20):
            seen[expr].add(_counted(expr)[1])

    threads = [threading.Thread(target=run, args=(e,)) for e in exprs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {e: {c} for e, c in exprs.items()}


def test_cost_limit_fails_the_claim_with_the_reason() -> None:
    expr = "lists.range(100000).map(i, i * 2).size() > 0"
    e = Engine([slice_("a", node_gpus(2))], [device_class()], [])
    placed = e.allocate(claim(exactly(selectors=[expr])))
    assert not placed.ok
    assert "CEL runtime error" in str(placed.explanation)
    assert "actual cost limit exceeded" in str(placed.explanation)
