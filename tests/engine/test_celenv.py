"""Device selectors in kube-scheduler's CEL environment: libraries, compile-time checks, cost
limit, value semantics and the features this evaluator refuses by name."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector, qvalue, svalue
from kubeacc.engine.engine import Engine
from kubeacc.engine.semver import parse_semver
from tests.engine.helpers import claim, device_class, exactly, node_gpus, slice_

K = 'device.attributes["k"]'


def _device() -> DeviceEnv:
    return DeviceEnv(
        {
            "driver": "gpu.example.com",
            "attributes": {
                "k": {
                    "model": "h100",
                    "index": 3,
                    "label": "gpu-\u00e9",
                    "addr": "10.1.2.3",
                    "endpoint": "https://a.example.com:8443/x?q=1",
                    "version": svalue(parse_semver("1.2.3")),
                }
            },
            "capacity": {"k": {"memory": qvalue(Fraction(80 * 2**30))}},
            "allowMultipleAllocations": False,
        }
    )


def matches(expr: str) -> bool:
    return _device().matches(compile_selector(expr))


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (f'{K}.model.find("[0-9]+") == "100"', True),
        (f'{K}.model.findAll("[a-z]") == ["h"]', True),
        ('"a1b2c3".findAll("[0-9]", 2) == ["1", "2"]', True),
        (f'strings.quote({K}.model) == "\\"h100\\""', True),
        (f"lists.range(4).exists(i, i == {K}.index)", True),
        ("[3, 1, 2].sort() == [1, 2, 3] && [1, 2, 3].isSorted()", True),
        ("[1, 5, 2].max() == 5 && [4, 2].min() == 2 && [1, 2].sum() == 3", True),
        ('sets.contains(["a100", "h100"], ["h100"]) && sets.intersects([1], [1, 2])', True),
        (f'isIP({K}.addr) && ip({K}.addr).family() == 4 && !isIP("10.0.0.300")', True),
        (
            f'cidr("10.0.0.0/8").containsIP({K}.addr) && cidr("10.0.0.0/8").prefixLength() == 8',
            True,
        ),
        (f'url({K}.endpoint).getHostname() == "a.example.com"', True),
        (
            f'url({K}.endpoint).getPort() == "8443" && url({K}.endpoint).getScheme() == "https"',
            True,
        ),
        (f'{K}.exists(k, v, k == "model" && v == "h100")', True),
        ("[1, 2].transformList(i, v, v * 2) == [2, 4]", True),
        (f'{K}.?nope.orValue("x") == "x"', True),
        ('{"a": 1}[?"b"].orValue(7) == 7', True),
        (f"{K}.label.size() == 5", True),
        (f"has({K}.model) && !has({K}.nope)", True),
        ('has(device.attributes["other.example.com"].x)', False),
        (f'cel.bind(a, {K}, a.model == "h100" && a.index == 3)', True),
        ('device.capacity["k"].memory.compareTo(quantity("40Gi")) > 0', True),
        ('quantity("1") == quantity("1000m")', True),
        (f"[{K}.index, {K}.index].size() == 2", True),
        ('[device.capacity["k"].memory, quantity("1")].size() == 2', True),
        (f'{K}.version.isLessThan(semver("1.10.0"))', True),
    ],
)
def test_kubernetes_environment(expr: str, expected: bool) -> None:
    assert matches(expr) is expected


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ('[1, "a"].size() == 2', "list literal"),
        ('{"a": 1, "b": "c"}.size() == 2', "map literal values"),
        ('{1: "a", "b": "c"}.size() == 2', "map literal keys"),
        ('[1, "a"].sort() == [1, "a"]', "list literal"),
        ('1 in [1, "a"]', "list literal"),
        (f"[{K}.index, 2].size() == 2", "list literal"),
        ('"abc".reverse() == "cba"', "reverse"),
        ("math.greatest(1, 2) == 2", "math"),
        ('"abc" + "d"', "must evaluate to bool"),
        ("device.model == (", "Syntax error"),
    ],
)
def test_rejected_at_compile_time(expr: str, reason: str) -> None:
    with pytest.raises(CelError, match="compile") as err:
        compile_selector(expr)
    assert reason in str(err.value)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ('quantity("1.5").asInteger() == 1', "cannot convert value to integer"),
        (f"{K}.nope == 1", "nope"),
        ('ip("10.0.0.300").family() == 4', "parse error"),
        ("[].min() == 0", "empty list"),
        ('"aa".find("(a)\\\\1") == "aa"', "not RE2"),
        ("lists.range(2000).all(i, lists.range(2000).all(j, i >= 0))", "cost limit"),
        ("lists.range(100000).map(i, i * 2).size() > 0", "actual cost limit exceeded"),
        ("lists.range(300).all(i, lists.range(300).all(j, [i, j].size() == 2))", "cost limit"),
    ],
)
def test_runtime_errors(expr: str, reason: str) -> None:
    with pytest.raises(CelError, match=reason):
        matches(expr)


@pytest.mark.parametrize(
    "expr",
    [
        '"cel.@mapInsert" != ""',
    ],
)
def test_unsupported_feature_is_named(expr: str) -> None:
    with pytest.raises(CelError, match="unsupported CEL feature"):
        matches(expr)


@pytest.mark.parametrize(
    "expr",
    [
        'string(ip("::1")) == "::1"',
        'cel.bind(c, cidr("10.0.0.0/8"), string(c) == "10.0.0.0/8")',
        'string(cidr("10.1.0.0/8")) == "10.1.0.0/8"',
        "[1, 2].indexOf(2) == 1 && [1, 2, 1].lastIndexOf(1) == 2 && [3].indexOf(4) == -1",
        '"abc".indexOf("c") == 2 && ["a"].indexOf("a") == 0',
        "[[1].indexOf(1)].indexOf(0) == 0",
        "1 < 1.5 && 2u > 1 && 1.5 >= 1u && !(2 <= 1.5)",
        '{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}',
        "[5, 6].transformMap(i, v, v > 5, v) == {1: 6}",
        '{"a": 1}.transformMapEntry(k, v, {v: k}) == {1: "a"}',
    ],
)
def test_renamed_functions_evaluate(expr: str) -> None:
    assert matches(expr)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("[1.0].indexOf(1) == 0", "no matching overload for 'indexOf'"),
        ('string(ip("::1")) + kubeacc_string(1) == ""', "undeclared reference"),
        ("[1, 1].transformMapEntry(i, v, {v: i}).size() == 1", "key 1 already exists"),
    ],
)
def test_renamed_functions_fail_like_kube_scheduler(expr: str, reason: str) -> None:
    with pytest.raises(CelError, match=reason):
        matches(expr)


def _fa(expr: str) -> dict[str, Any]:
    sub = {"deviceClassName": "gpu.kubeacc.io", "count": 1}
    return {
        "name": "gpus",
        "firstAvailable": [
            {**sub, "name": "big", "count": 9},
            {**sub, "name": "one", "selectors": [{"cel": {"expression": expr}}]},
        ],
    }


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ('"cel.@mapInsert" != ""', "unsupported CEL feature"),
        ('format.nope().validate("a").hasValue()', "undeclared reference"),
        ('[1, "a"].size() == 2', "list literal"),
        ("device.model == (", "Syntax error"),
    ],
)
def test_engine_reports_selector_errors_without_raising(expr: str, reason: str) -> None:
    e = Engine([slice_("a", node_gpus(2))], [device_class()], [])
    placed = e.allocate(claim(_fa(expr)))
    assert not placed.ok and reason in str(placed.explanation)
    placed = e.allocate(claim(exactly(selectors=[expr])))
    assert not placed.ok and reason in str(placed.explanation)


def test_cost_counted_while_running() -> None:
    """A macro that stops early costs only what ran (cel-go: 4,460), so it is not refused."""
    assert matches("lists.range(400).all(i, lists.range(400).all(j, j < i || i == 0))") is False
