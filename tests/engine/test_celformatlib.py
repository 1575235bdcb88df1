"""The format library's source rewrite and its evaluation in the engine's CEL."""

from __future__ import annotations

import pytest

from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector
from kubeacc.engine.celformatlib import rewrite


@pytest.mark.parametrize(
    ("source", "rewritten"),
    [
        ('format.named("uri")', 'kubeacc_fmtNamed("uri")[?0]'),
        ("f.validate(g(x, (y)))", "f.kubeacc_fmtValidate(g(x, (y)))[?0]"),
        (
            'format . named ( "a" ).value() . validate("b")',
            'kubeacc_fmtNamed( "a" )[?0].value() . kubeacc_fmtValidate("b")[?0]',
        ),
        # strings, raw strings and comments are not code
        ('"x.validate(" + f.validate(")")', '"x.validate(" + f.kubeacc_fmtValidate(")")[?0]'),
        ("r'\\'.validate(' == ''", "r'\\'.validate(' == ''"),
        ('"""a"b.validate("""', '"""a"b.validate("""'),
        ("a // .validate(\nb", "a // .validate(\nb"),
        # not the library: another receiver's format, a name that only contains it
        ('x.format.named("a")', 'x.format.named("a")'),
        ('myformat.named("a")', 'myformat.named("a")'),
        ("f.validated(1)", "f.validated(1)"),
        # unbalanced: left for the checker to report
        ("f.validate(1", "f.validate(1"),
    ],
)
def test_rewrite(source: str, rewritten: str) -> None:
    assert rewrite(source) == rewritten


DEVICE = {
    "driver": "gpu.example.com",
    "attributes": {"gpu.example.com": {"model": "a100", "host": "Bad_Name"}},
    "capacity": {},
    "allowMultipleAllocations": False,
}
A = 'device.attributes["gpu.example.com"]'


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (f"format.dns1123Label().validate({A}.model) == optional.none()", True),
        (f"format.dns1123Label().validate({A}.host).hasValue()", True),
        (f'format.qualifiedName().validate({A}.host).orValue(["none"]) == ["none"]', True),
        ('format.named("datetime").hasValue() && !format.named("dateTime").hasValue()', True),
        ('format.named("uuid") == optional.of(format.uuid())', True),
        ("format.uri() == format.byte()", False),
        (
            'format.labelValue().validate("-x").value()[0].startsWith("a valid label must")',
            True,
        ),
        ('format.named("date").value().validate("2023-02-29").value() == ["invalid date"]', True),
    ],
)
def test_library_evaluates(expr: str, expected: bool) -> None:
    assert DeviceEnv(DEVICE).matches(compile_selector(expr)) is expected


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ('"x".validate("a").hasValue()', "no matching overload for 'validate'"),
        ("format.named(1).hasValue()", "no matching overload for 'format.named'"),
        ("format.dns1123Label().validate('a')", "must evaluate to bool"),
        ("kubeacc_fmtNamed('uri').size() == 1", "undeclared reference to 'kubeacc_fmtNamed'"),
    ],
)
def test_misuse_does_not_compile(expr: str, reason: str) -> None:
    with pytest.raises(CelError, match=reason):
        compile_selector(expr)
