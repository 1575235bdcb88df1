"""``string.format`` as kube-scheduler evaluates it (expected strings are the allocator's own
answers, recorded from the Go allocator of the differential harness)."""

from __future__ import annotations

import datetime

import pytest

from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector
from kubeacc.engine.celformat import FormatError, format_string, go_quote

GOOD = [
    ("%s", ["x"], "x"),
    ("%d and %s", [42, "a"], "42 and a"),
    ("%%%s%%", ["x"], "%x%"),
    ("%s", [1.0], "1"),
    ("%s", [123456789.0], "1.23456789e+08"),
    ("%s", [999999.0], "999999"),
    ("%s", [1.5e-5], "1.5e-05"),
    ("%s", [-0.0], "-0"),
    ("%s", [float("inf")], "+Inf"),
    ("%f", [1234.5], "1,234.500000"),
    ("%.2f", [-1234567.891], "-1,234,567.89"),
    ("%.0f", [2.5], "2"),
    ("%.2f", [-0.0001], "-0.00"),
    ("%f", [-0.0], "0.000000"),
    ("%f", ["-Infinity"], "-\u221e"),
    ("%.30f", [0.1], "0.100000000000000005551115123126"),
    ("%e", [2.71828], "2.718280\u00d710\u2070\u2070"),
    ("%e", [-0.00001234], "-1.234000\u00d710\u207b\u2070\u2075"),
    ("%e", [1e300], "1.000000\u00d710\u00b3\u2070\u2070"),
    ("%.3e", [2.71828], "2.718280\u00d710\u2070\u2070"),
    ("%.20e", [2.5], "       2.500000\u00d710\u2070\u2070"),
    ("%e", ["NaN"], "   NaN"),
    ("%x", [-26], "-1a"),
    ("%X", ["h\u00e9llo"], "68C3A96C6C6F"),
    ("%x", [b"\xff\x00"], "ff00"),
    ("%o", [-8], "-10"),
    ("%b", [-5], "-101"),
    ("%b", [True], "1"),
    ("%.3d", [5], "5"),
    ("%s", [[1.0, "a", b"x", {"b": 1, "a": 2.5}]], '[1.000000, "a", b"x", {"a":2.500000, "b":1}]'),
    ("%s", [{1: "a", -2: "b", 10: "c"}], '{-2:"b", 1:"a", 10:"c"}'),
    ("%s", [{True: 1, False: 2}], "{false:2, true:1}"),
    ("%s", [[None, True]], "[null, true]"),
    ("%s", [[float("nan"), float("-inf")]], '["NaN", "-Inf"]'),
    ("%s", [datetime.timedelta(hours=1, minutes=45, seconds=47)], "6347s"),
    ("%s", [datetime.timedelta(seconds=-1.5)], "-1.5s"),
    ("%s", [[datetime.timedelta(microseconds=-1)]], '[duration("-0.000001s")]'),
    (
        "%s",
        [[datetime.datetime(2023, 1, 1, 0, 0, 0, 500000, tzinfo=datetime.UTC)]],
        '[timestamp("2023-01-01T00:00:00.5Z")]',
    ),
    ("\u00e9%s\u00fc", ["\u00f6"], "\u00e9\u00f6\u00fc"),
]


@pytest.mark.parametrize(("fmt", "args", "expected"), GOOD)
def test_formats_as_the_allocator(fmt: str, args: list[object], expected: str) -> None:
    assert format_string(fmt, args) == expected


BAD = [
    ("%s %s", ["a"], "index 1 out of range"),
    ("%", [], "index 0 out of range"),
    ("%", [1], "unexpected end of string"),
    ("%.2", [1], "could not find end of precision specifier"),
    ("%.x", [1], 'strconv.Atoi: parsing "": invalid syntax'),
    ("%5d", [1], 'unrecognized formatting clause "5"'),
    ("%\u00e9", [1], 'unrecognized formatting clause "\u00c3"'),
    ("%d", [1.5], "decimal clause can only be used on integers, was given double"),
    ("%d", [True], "decimal clause can only be used on integers, was given bool"),
    ("%f", [1], "fixed-point clause can only be used on doubles, was given int"),
    ("%e", ["x"], "scientific clause can only be used on doubles, was given string"),
    ("%x", [1.5], "only integers, byte buffers, and strings can be formatted as hex"),
    ("%o", ["a"], "octal clause can only be used on integers, was given string"),
    ("%b", [1.5], "only integers and bools can be formatted as binary, was given double"),
    ("%s", [b"\xff"], 'could not convert argument "invalid UTF-8 in bytes'),
]


@pytest.mark.parametrize(("fmt", "args", "message"), BAD)
def test_refuses_with_the_allocators_message(fmt: str, args: list[object], message: str) -> None:
    with pytest.raises(FormatError, match=message.replace("(", r"\(").replace(".", r"\.")):
        format_string(fmt, args)


def test_go_quote_escapes_what_go_does_not_print() -> None:
    assert go_quote('a"b\\\n\a\x00\x7f\u0085\u00ad\U0001f600 ') == (
        '"a\\"b\\\\\\n\\a\\x00\\x7f\\u0085\\u00ad\U0001f600 "'
    )


def _device() -> DeviceEnv:
    return DeviceEnv(
        {
            "driver": "gpu.example.com",
            "attributes": {"k": {"model": "h100", "index": 3}},
            "capacity": {"k": {}},
            "allowMultipleAllocations": False,
        }
    )


@pytest.mark.parametrize(
    "expr",
    [
        '"%s-%d".format([dyn(device.attributes["k"].model), dyn(device.attributes["k"].index)])'
        ' == "h100-3"',
        '"%s %d".format(["a", 1]) == "a 1"',
        '"%.1f".format([0.25]) == "0.2"',
        '"%s".format(dyn(["a", "b"])) == "a"',
        'device.attributes["k"].model.format([1]) == "h100"',
        'cel.bind(k, "%s".format([device.capacity["k"]]), k == "{}")',
        '"format %s".format(["format"]) == "format format"',
        '["%d"].all(f, f.format([1]) == "1")',
    ],
)
def test_selectors_use_the_allocators_format(expr: str) -> None:
    assert _device().matches(compile_selector(expr))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ('"%s".format([device.attributes["k"].model]) == ""', "was given google.protobuf.Any"),
        (
            'cel.bind(a, device.attributes["k"], "%d".format([a.index]) == "")',
            "google.protobuf.Any",
        ),
        ('"%s".format([device.capacity["k"]["memory"]]) == ""', "was given kubernetes.Quantity"),
        ('"%s".format([device]) == ""', "was given kubernetes.DRADevice"),
        ('"%d".format([device.driver]) == ""', "was given string"),
        ('"%s".format([quantity("1")]) == ""', "was given kubernetes.Quantity"),
        ('"%s".format([[optional.of(1)]]) == ""', "was given optional_type"),
        ('"%s".format([1, 2]) == ""', r"too many arguments supplied to string.format \(expected 1"),
        ('"%s %s".format(["a"]) == ""', "index 1 out of range"),
        ('"%q".format([1]) == ""', 'unrecognized formatting clause "q"'),
        ('false && "%e".format([1]) == ""', "scientific clause"),
    ],
)
def test_compile_check_refuses_as_the_allocator(expr: str, message: str) -> None:
    with pytest.raises(CelError, match=message):
        compile_selector(expr, "1.36")
    if "google.protobuf.Any" not in message:
        with pytest.raises(CelError, match=message):
            compile_selector(expr, "1.37")


@pytest.mark.parametrize(
    ("expr", "matches"),
    [
        ('"%s".format([device.attributes["k"].model]) == "a100"', False),
        ('cel.bind(a, device.attributes["k"], "%d".format([a.index]) == "3")', True),
    ],
)
def test_v137_judges_an_attribute_argument_at_run_time(expr: str, matches: bool) -> None:
    """cel-go v0.29 (Kubernetes 1.37) compiles an attribute value not wrapped in ``dyn``."""
    assert _device().matches(compile_selector(expr, "1.37")) is matches


def test_runtime_error_fails_the_selector() -> None:
    with pytest.raises(CelError, match="decimal clause can only be used on integers"):
        _device().matches(compile_selector('"%d".format(dyn([1.5])) == ""'))


@pytest.mark.parametrize(
    "expr",
    [
        '"%s".format(["format.x"]) == "format.x"',
        'device.attributes["k"].model != "format.dns1123Label()"',
    ],
)
def test_the_word_format_is_not_the_format_library(expr: str) -> None:
    assert _device().matches(compile_selector(expr))


@pytest.mark.parametrize(
    ("expr", "matches"),
    [
        ('format.dns1123Label().validate("a").hasValue()', False),
        ('format.named("uri").hasValue()', True),
    ],
)
def test_the_format_library_is_not_string_format(expr: str, matches: bool) -> None:
    assert _device().matches(compile_selector(expr)) is matches
