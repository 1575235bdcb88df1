"""The ``format`` library (``format.<name>().validate(s)``, ``format.named``) in the engine
against kube-scheduler's allocator, message for message.

For each format and input the engine's own result decides the selector: ``validate`` must
equal ``optional.none()`` where the engine finds no error, else ``optional.of([...])`` of the
engine's messages, and the allocator must fit the device (any difference in validity or in a
message's text fails).
"""

from __future__ import annotations

import pytest

from kubeacc.differential.harness import GoAllocator
from kubeacc.engine.celformat import go_quote
from kubeacc.engine.namedformats import FORMATS
from tests.differential.test_renamed_cel import _both

A = 'device.attributes["gpu.example.com"]'
LONG = "a" * 64
SUB = ".".join(["abcdefghij"] * 24)  # 263 characters

INPUTS: dict[str, tuple[str, ...]] = {
    "dns1123Label": ("a100", "", "A100", "my-name", "-a", "a-", "a.b", LONG, LONG + ".b", "\u00e9"),
    "dns1123Subdomain": ("example.com", "a..b", "Example.com", SUB, "a_b", "a\n"),
    "dns1035Label": ("my-name", "1abc", "abc-123", "a" * 63, LONG, "a.b"),
    "qualifiedName": (
        "MyName",
        "example.com/MyName",
        "/x",
        "a/b/c",
        "example.com/",
        "Ex ample.com/x",
        "x/" + LONG,
        "_x",
        "my.name",
    ),
    "dns1123LabelPrefix": ("my-", "a-", "ab-", "-", "a--", "My-"),
    "dns1123SubdomainPrefix": ("example.com-", "a.-", "x-"),
    "dns1035LabelPrefix": ("abc-", "1-", "a1-"),
    "labelValue": ("", "MyValue", "my_value", "-x", "a" * 63, LONG, "\u00fcn"),
    "uri": (
        "https://a.example.com:8443/x?q=1",
        "",
        "*",
        "/a/b",
        "a b",
        "mailto:x",
        "//host/p",
        "http://a:b:c/",
        "foo://a:b:c/",
        "http://[::1]:80/",
        "http://[1.2.3.4]/",
        "http://[::1/",
        "http://x%zz/",
        "/p%2",
        "http://us er@h/",
        "http://u:p@h/",
        "http://h%41/",
        "http://h%80/",
        "http://h x/",
        "1http://x",
        ":x",
        "http://h:8o/",
        "http://[fe80::1%25eth0]/",
        "http://a[b]/",
    ),
    "uuid": (
        "123e4567-e89b-12d3-a456-426614174000",
        "123E4567E89B12D3A456426614174000",
        "123e4567-e89b-12d3-a456-42661417400",
        "123e4567-e89b-12d3-a456-426614174000\n",
    ),
    "byte": ("aGVsbG8=", "aGVsbA==", "aGVs", "", "aGVsbG8", "a-b_"),
    "date": ("2024-02-29", "2023-02-29", "2024-13-01", "2024-1-01", "2024-00-10", "24-01-01"),
    "datetime": (
        "2024-02-29T12:00:00Z",
        "2024-02-29t23:59:59.5+01:00",
        "2024-02-29T24:00:00Z",
        "2024-02-29 12:00:00Z",
        "2024-02-29T12:00:00",
        "2024-02-29T12:00:00Zt",
    ),
}

CASES = [(name, s) for name, inputs in INPUTS.items() for s in inputs]


def _expected(name: str, value: str) -> str:
    """``optional.none()`` or ``optional.of([...])`` of the engine's messages (the engine's CEL
    must then evaluate the selector to true too)."""
    errs = FORMATS[name](value)
    if not errs:
        return "optional.none()"
    return "optional.of([" + ", ".join(go_quote(m) for m in errs) + "])"


@pytest.mark.parametrize(("name", "value"), CASES)
def test_validate_agrees_with_the_allocator(
    go_allocator: GoAllocator, name: str, value: str
) -> None:
    call = f"format.{name}().validate({go_quote(value)})"
    selector = f"{call} == {_expected(name, value)}"
    assert _both(go_allocator, selector) == (True, True), selector


@pytest.mark.parametrize(
    "selector",
    [
        'format.named("uri").hasValue() && !format.named("URI").hasValue()',
        'format.named("dns1123Label") == optional.of(format.dns1123Label())',
        "format.dns1123Label() != format.dns1035Label()",
        f'format.named("labelValue").value().validate({A}.model) == optional.none()',
        f'!format.dns1035Label().validate("x" + {A}.model).hasValue()',
        'format.named("nope").orValue(format.uri()).validate("/x") == optional.none()',
        '"validate(" != "" && format.qualifiedName().validate("a/b/c").hasValue()',
        '[format.uuid(), format.date()].all(f, f.validate("2024-01-01").hasValue() == '
        "(f == format.uuid()))",
        'format.named("byte").optMap(f, f.validate("eA==")) == optional.of(optional.none())',
    ],
)
def test_library_calls_evaluate_as_in_the_allocator(
    go_allocator: GoAllocator, selector: str
) -> None:
    assert _both(go_allocator, selector) == (True, True), selector


@pytest.mark.parametrize(
    "selector",
    [
        "format.nope().validate('a').hasValue()",
        '"x".validate("a").hasValue()',
        "format.named(1).hasValue()",
        "format.dns1123Label().validate(1).hasValue()",
        "format.dns1123Label().validate('a')",
        "kubeacc_fmtNamed('uri').size() == 1",
    ],
)
def test_library_misuse_fails_as_in_the_allocator(go_allocator: GoAllocator, selector: str) -> None:
    assert _both(go_allocator, selector) == ("error", "error"), selector
