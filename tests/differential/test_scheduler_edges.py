"""The last disagreements with kube-scheduler's allocator (issue 49), one shape at a time.

Each case runs through the Go harness (k8s.io/dynamic-resource-allocation/structured) and the
engine: verdicts (fits, does not, fails the pod), and where both allocate, the requests or
subrequests the results are under, must be equal. The differential generator draws each shape
too (``cel-has-domain``, ``quantity-representation``, ``cel-compile-member``,
``distinct-versions``, ``generations-older``, ``cel-long-comprehension``: test_cost_cel.py runs
that one selector by selector).
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.engine.engine import Engine

DRIVER = "gpu.example.com"
A = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'


def _slice(
    name: str, devices: list[dict[str, Any]], node: str = "n0", gen: int = 1, count: int = 1
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "p", "generation": gen, "resourceSliceCount": count},
            "nodeName": node,
            "devices": devices,
        },
    }


def _claim(requests: list[dict[str, Any]], constraints: list[Any] | None = None) -> Any:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {
        "metadata": {"name": "c", "namespace": "default", "uid": "c"},
        "spec": {"devices": devices},
    }


def _exact(count: int = 1, selectors: tuple[str, ...] = (), mode: str = "ExactCount") -> Any:
    exact: dict[str, Any] = {"deviceClassName": "gpu", "allocationMode": mode}
    if mode == "ExactCount":
        exact["count"] = count
    if selectors:
        exact["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return exact


def _scenario(
    slices: list[dict[str, Any]],
    claim: dict[str, Any],
    allocated: list[dict[str, Any]] | None = None,
    nodes: int = 1,
) -> dict[str, Any]:
    scen, _ = scenario(0)
    scen["slices"] = slices
    scen["allocated"] = allocated or []
    scen["nodes"] = scen["nodes"][:nodes]
    scen["claims"] = [claim]
    scen["pods"] = [[0]]
    return scen


def _answers(go: GoAllocator, scen: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Per node: (the scheduler's answer, the engine's); an answer is "error", False, or the
    sorted (request, device) pairs of the allocation."""
    rows = go.pairs(scen)[0]
    engine = Engine(
        scen["slices"], scen["classes"], scen["allocated"], scen["nodes"], release=go.release
    )
    out = []
    for node, theirs in zip(scen["nodes"], rows, strict=True):
        name = node["metadata"]["name"]
        ours = engine.allocate_pod(scen["claims"], node=name, commit=False, pod="p")
        a: Any
        if theirs.get("fatal"):
            a = "error"
        elif not theirs["ok"]:
            a = False
        else:
            a = sorted(
                (r["request"], r["device"]) for r in theirs["allocations"][0]["devices"]["results"]
            )
        b: Any
        if ours.error is not None:
            b = "error"
        elif not ours.ok:
            b = False
        else:
            alloc = ours.placements[0].allocation
            assert alloc is not None
            b = sorted((r["request"], r["device"]) for r in alloc["devices"]["results"])
        out.append((a, b))
    return out


def _one_device(expression: str, memory: str = "40Gi") -> dict[str, Any]:
    attrs = {"model": {"string": "a100"}, "numa": {"int": 1}}
    dev = {"name": "dev-0", "attributes": attrs, "capacity": {"memory": {"value": memory}}}
    return _scenario(
        [_slice("s", [dev])], _claim([{"name": "r0", "exactly": _exact(1, (expression,))}])
    )


# -- 1. has() on an attribute domain ------------------------------------------------------------

HAS = (
    "has(device.attributes.x)",
    "has(device.capacity.x)",
    f'has(device.attributes.x) && {A}.model == "a100"',
    "!has(device.attributes.x) || device.driver == 'gpu.example.com'",
    "has(device.attributes.x.y)",
    "!has(device.capacity.other.memory)",
    f"has({A}.model) && has(device.attributes.x)",
    "device.attributes.?x.hasValue()",
)


@pytest.mark.parametrize("expression", HAS)
def test_has_on_a_domain_as_in_the_allocator(go_allocator: GoAllocator, expression: str) -> None:
    [(theirs, ours)] = _answers(go_allocator, _one_device(expression))
    assert ours == theirs, expression


# -- 2. quantity conversions that fail in Go -----------------------------------------------------

#: (capacity written, selector): Go's ``AsInt64`` fails on a quantity it keeps as a decimal
#: (a binary suffix with a fraction) or with a negative scale (``1000m``), whatever its value
QUANTITY = (
    ("0.5Ti", f"{C}.memory.asInteger() > 0"),
    ("0.5Ti", f"{C}.memory.isInteger()"),
    ("512Gi", f"{C}.memory.asInteger() > 0"),
    ("512Gi", f"{C}.memory.isInteger()"),
    ("1.5Ki", f"{C}.memory.isInteger()"),
    ("1000m", f"{C}.memory.isInteger()"),
    ("1000m", f"{C}.memory.asInteger() == 1"),
    ("2k", f"{C}.memory.asInteger() == 2000"),
    ("40Gi", 'quantity("1.000").isInteger()'),
    ("40Gi", 'quantity("0.5Ki").asInteger() == 512'),
    ("40Gi", 'quantity("1500m").add(quantity("500m")).isInteger()'),
    ("40Gi", 'quantity("1500m").add(quantity("0")).isInteger() == false'),
    ("40Gi", 'quantity("1.5").add(1).sub(quantity("500m")).isInteger()'),
    ("40Gi", 'quantity("2").add(quantity("0.5Ki")).isInteger()'),
    ("40Gi", 'quantity("1k").add(quantity("1")).asInteger() == 1001'),
    ("0.5Ti", f'{C}.memory == quantity("512Gi")'),
    ("0.5Ti", f'{C}.memory != quantity("512Gi")'),
    ("40Gi", 'quantity("1000m") == quantity("1")'),
    ("40Gi", 'quantity("1.5") == quantity("1500m")'),
    ("0.5Ti", f'{C}.memory.compareTo(quantity("512Gi")) == 0'),
)


@pytest.mark.parametrize(("memory", "expression"), QUANTITY)
def test_quantity_conversion_as_in_the_allocator(
    go_allocator: GoAllocator, memory: str, expression: str
) -> None:
    [(theirs, ours)] = _answers(go_allocator, _one_device(expression, memory))
    assert ours == theirs, (memory, expression)


#: spellings whose form decides isInteger() (Go's fast path: digits, suffix, scale)
SPELLINGS = (
    "0",
    "000",
    "0Ki",
    "0.0",
    ".5",
    "1.5",
    "1.000",
    "1000m",
    "-1000m",
    "2k",
    "1e3",
    "1e-3",
    "1n",
    "1.5n",
    "40Gi",
    "512Gi",
    "0.5Ti",
    "1.5Ki",
    "1Ti",
    "1024Ti",
    "1Pi",
    "123456789012345678",
    "1234567890123456789",
    "9223372036854775807",
)


@pytest.mark.parametrize("text", SPELLINGS)
def test_quantity_form_as_in_the_allocator(go_allocator: GoAllocator, text: str) -> None:
    for expression in (f'quantity("{text}").isInteger()', f"{C}.memory.isInteger()"):
        [(theirs, ours)] = _answers(go_allocator, _one_device(expression, text))
        assert ours == theirs, (text, expression)


# -- 3. compile-time rejections ---------------------------------------------------------------

COMPILE = (
    f"{C}.memory.sign() == 1",
    'quantity("1").sign() == 1',
    f"sign({C}.memory) == 1",
    'sign(quantity("-1")) == -1',
)


@pytest.mark.parametrize("expression", COMPILE)
def test_compiles_as_in_the_allocator(go_allocator: GoAllocator, expression: str) -> None:
    [(theirs, ours)] = _answers(go_allocator, _one_device(expression))
    assert ours == theirs, expression


# -- 4. firstAvailable with distinctAttribute over versions ------------------------------------


@pytest.mark.parametrize(
    "versions",
    [
        ("1.10.0", "1.2.3", "1.2.3+build.5"),
        ("1.2.3", "1.2.3+build.5"),
        ("1.2.3+build.5", "1.2.3+build.6", "1.2.3"),
        ("1.2.3", "1.2.3"),
    ],
)
def test_distinct_versions_pick_the_scheduler_subrequest(
    go_allocator: GoAllocator, versions: tuple[str, ...]
) -> None:
    devs = [
        {"name": f"dev-{i}", "attributes": {"driverVersion": {"version": v}}}
        for i, v in enumerate(versions)
    ]
    subs = [
        {"name": "s0", **_exact(len(versions))},
        {"name": "s1", **_exact(1)},
    ]
    claim = _claim(
        [{"name": "r0", "firstAvailable": subs}],
        [{"distinctAttribute": f"{DRIVER}/driverVersion"}],
    )
    [(theirs, ours)] = _answers(go_allocator, _scenario([_slice("s", devs)], claim))
    assert ours == theirs, versions


# -- 5. older pool generations ------------------------------------------------------------------


def _gens_device(name: str, capacity: str | None = "memory", shared: bool = True) -> Any:
    dev: dict[str, Any] = {"name": name}
    if capacity:
        dev["capacity"] = {capacity: {"value": "40Gi"}}
    if shared:
        dev["allowMultipleAllocations"] = True
    return dev


#: generation 1 on n0, generation 2 on n1 only: n0 uses generation 1 (v0.37.2's gathering);
#: an allocated share of ``dev-0`` consumes ``memory`` by the name generation 1's device wrote
GENERATIONS = {
    "the newer dev-0 spells the capacity otherwise": [
        _gens_device("dev-0"),
        _gens_device("dev-0", f"{DRIVER}/memory"),
    ],
    "the newer dev-0 has no capacity": [_gens_device("dev-0"), _gens_device("dev-0", None, False)],
    "the newer generation has no dev-0": [_gens_device("dev-0"), _gens_device("dev-9")],
    "the older dev-0 allows no shares": [
        _gens_device("dev-0", shared=False),
        _gens_device("dev-0"),
    ],
}


@pytest.mark.parametrize("case", sorted(GENERATIONS))
@pytest.mark.parametrize("memory", ["40Gi", "8Gi"])
def test_older_generation_as_in_the_allocator(
    go_allocator: GoAllocator, case: str, memory: str
) -> None:
    old, new = GENERATIONS[case]
    slices = [_slice("a", [old], "n0", gen=1), _slice("b", [new], "n1", gen=2)]
    share = {
        "request": "r0",
        "driver": DRIVER,
        "pool": "p",
        "device": "dev-0",
        "shareID": "00000000-0000-0000-0000-000000000001",
        "consumedCapacity": {"memory": memory},
    }
    allocated = [
        {
            "metadata": {"name": "a", "namespace": "default", "uid": "a"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [share]}}},
        }
    ]
    exact = _exact(1)
    exact["capacity"] = {"requests": {"memory": "8Gi"}}
    for request in (exact, _exact(1)):
        claim = _claim([{"name": "r0", "exactly": request}])
        answers = _answers(go_allocator, _scenario(slices, claim, allocated, nodes=2))
        for theirs, ours in answers:
            assert ours == theirs, (case, memory, request)
