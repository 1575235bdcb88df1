"""``string.format`` in the engine against kube-scheduler's allocator, string for string.

For each call the engine's own result decides the selector: where the engine formats a
string, the selector is ``<call> == "<that string>"`` and the allocator must fit the device
(so any difference in the text, down to a separator, fails); where the engine refuses the
call, the allocator must fail the pod with an error too.
"""

from __future__ import annotations

from typing import Any

import pytest
from cel_expr_python import cel

from kubeacc.differential.harness import GoAllocator
from kubeacc.engine import celenv
from kubeacc.engine.celformat import go_quote
from kubeacc.engine.celformatcheck import rename_format_calls
from kubeacc.engine.release import release
from tests.differential.test_renamed_cel import _both, _scenario

A = 'device.attributes["gpu.example.com"]'

CALLS = (
    '"%s and %d".format(["a", 42])',
    '"%s".format([1.0, 2.5].map(x, x * 3.0))',
    '"%s %s %s".format([123456789.0, 999999.0, 1.5e-5])',
    '"%s".format([-0.0])',
    '"%s".format([double("Inf")])',
    '"%f".format([1234.5])',
    '"%.2f".format([-1234567.891])',
    '"%.0f".format([2.5])',
    '"%.2f".format([-0.0001])',
    '"%f".format([-0.0])',
    '"%f %f %f".format(["NaN", "Infinity", "-Infinity"])',
    '"%.30f".format([0.1])',
    '"%f".format([1.7976931348623157e308])',
    '"%e".format([2.71828])',
    '"%e %e".format([-0.00001234, 1e300])',
    '"%.3e|%.20e|%.0e".format([2.71828, 2.5, 2.5])',
    '"%e".format(["-Infinity"])',
    '"%e".format([5e-324])',
    '"%x %X %x".format([-26, "h\u00e9llo", b"\\xff\\x00"])',
    '"%o %b %b %b".format([-8, -5, 5u, true])',
    '"%d".format([18446744073709551615u])',
    '"%.3d %.2s %.2x".format([5, "abc", 255])',
    '"%s".format([[1.0, "a", b"x", {"b": 1, "a": 2.5}]])',
    '"%s".format([{1: "a", -2: "b", 10: "c"}])',
    '"%s".format([{true: 1, false: 2}])',
    '"%s".format([{"b": 1, "a": 2, "A": 3, "": 4, "\u00e9": 5}])',
    '"%s".format([[null, true, type(1), type("a"), type([1]), type(quantity("1"))]])',
    '"%s".format([[double("NaN"), double("-Inf"), 1e21, -0.0]])',
    '"%s".format([["a\\"b\\n\\t\\u0007\\u0000\\u007f\\u0085\\u00ad\\u202f", "\\U0001F600"]])',
    '"%s %s %s".format([duration("1h45m47s"), duration("-1.5s"), duration("100ms")])',
    '"%s".format([[timestamp("2023-02-03T23:31:20Z"), duration("1.5s")]])',
    '"%s".format([timestamp("2023-01-01T00:00:00.5Z")])',
    f'"%s".format([{A}])',
    f'"%s/%d".format([dyn({A}.model), dyn({A}.numa)])',
    f"{A}.model.format([1])",
    # refused at compile time by v1.36 only: v1.37 judges an attribute value at run time
    f'"%s".format([{A}.model])',
    f'cel.bind(a, {A}, "%d".format([a.numa]))',
    f'"%d".format([{A}.model])',
    '"%s".format(dyn(["a", "b"]))',
    '"%s".format(["a"].map(x, x))',
    '"\u00e9%s\u00fc".format(["\u00f6"])',
    # refused at compile time
    '"%s".format([device])',
    '"%d".format([device.driver])',
    '"%s".format([quantity("1")])',
    '"%s".format([[optional.of(1)]])',
    '"%s".format([1, 2])',
    '"%s %s".format(["a"])',
    '"abc%".format([1])',
    '"%.2".format([1])',
    '"%.x".format([1])',
    '"%5d".format([1])',
    '"%\u00e9".format([1])',
    '"%.99999999999999999999f".format([1.0])',
    '"%x".format([1.5])',
    '"%e".format([1])',
    # refused at run time
    '"%d".format(dyn([1.5]))',
    '"%o".format(dyn(["a"]))',
    '"%s".format(dyn([quantity("1")]))',
    '"%s".format(dyn([[quantity("1")]]))',
    '"%s".format([[b"\\xff"]])',
    '"%s %s".format(dyn(["a"]))',
    '"%".format(dyn([]))',
    '"%z".format(dyn([1]))',
)


def _engine_format(call: str, version: str) -> str | None:
    """The engine's text for a call on the scenario's device, or None when it refuses, as
    the engine following Kubernetes ``version`` compiles it."""
    scen = _scenario("true")
    attrs = scen["slices"][0]["spec"]["devices"][0]["attributes"]
    device = {
        "driver": "gpu.example.com",
        "attributes": {"gpu.example.com": {k: next(iter(v.values())) for k, v in attrs.items()}},
        "capacity": {},
        "allowMultipleAllocations": False,
    }
    try:
        # the engine's compile-time checks
        selector = celenv.compile_selector(f'{call} == ""', release(version).name)
    except celenv.CelError:
        return None
    env = celenv.environment()
    program = env.deserialize(rename_format_calls(env.compile(call).serialize()))
    result = program.eval(celenv.DeviceEnv(device)._activation(selector))
    if result.type() == cel.Type.ERROR:
        return None
    value: Any = result.value()
    return value if isinstance(value, str) else None


@pytest.mark.parametrize("call", CALLS)
def test_format_agrees_with_the_allocator(go_allocator: GoAllocator, call: str) -> None:
    text = _engine_format(call, go_allocator.release)
    if text is None:
        theirs, ours = _both(go_allocator, f'{call} == ""')
        assert (theirs, ours) == ("error", "error"), call
    else:
        theirs, ours = _both(go_allocator, f"{call} == {go_quote(text)}")
        assert (theirs, ours) == (True, True), f"{call} -> {text!r}"
