"""The form Go holds a quantity in (kubeacc.engine.celquantity), without the Go harness: the
values below are what tests/differential/test_scheduler_edges.py checks against the allocator."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector
from kubeacc.engine.celquantity import DEC, INT, add_rep, as_int64, go_rep
from kubeacc.engine.k8scel import qvalue
from kubeacc.engine.quantity import parse_quantity


@pytest.mark.parametrize(
    ("text", "rep"),
    [
        ("0", INT),
        ("000", INT),
        ("0.0", "-1"),
        (".5", "-1"),
        ("1000m", "-3"),
        ("-1000m", "-3"),
        ("1.000", "-3"),
        ("2k", INT),
        ("1e3", INT),
        ("1e-3", "-3"),
        ("1n", "-9"),
        ("1.5n", DEC),
        ("512Gi", INT),
        ("0.5Ti", DEC),
        ("1.5Ki", DEC),
        ("1Ti", INT),
        ("1024Ti", DEC),
        ("1Pi", DEC),
        ("123456789012345678", INT),
        ("1234567890123456789", DEC),
    ],
)
def test_form_as_go_parses_it(text: str, rep: str) -> None:
    assert go_rep(text) == rep


def test_add_keeps_the_smaller_scale_and_turns_decimal() -> None:
    one_half, half = Fraction(3, 2), Fraction(1, 2)
    assert add_rep(one_half, "-3", half, "-3") == "-3"  # 1500m + 500m: 2 at scale -3
    assert add_rep(one_half, "-3", Fraction(0), INT) == "-3"
    assert add_rep(Fraction(0), INT, Fraction(2), INT) == INT
    assert add_rep(Fraction(2), INT, Fraction(512), DEC) == DEC
    assert add_rep(Fraction(1000), INT, Fraction(1), INT) == INT
    assert as_int64(Fraction(2), "-3") is None
    assert as_int64(Fraction(2), DEC) is None
    assert as_int64(Fraction(2), INT) == 2
    assert as_int64(Fraction(2**63), INT) is None


def _env(memory: str) -> DeviceEnv:
    cap = qvalue(parse_quantity(memory), go_rep(memory))
    return DeviceEnv(
        {
            "driver": "d",
            "attributes": {"d": {}},
            "capacity": {"d": {"memory": cap}},
            "allowMultipleAllocations": False,
        }
    )


def test_selectors_see_the_form_and_compare_values() -> None:
    c = 'device.capacity["d"].memory'
    assert not _env("0.5Ti").matches(compile_selector(f"{c}.isInteger()"))
    assert _env("512Gi").matches(compile_selector(f"{c}.isInteger()"))
    with pytest.raises(CelError, match="cannot convert value to integer"):
        _env("1000m").matches(compile_selector(f"{c}.asInteger() == 1"))
    # equal values in different forms are equal, by the lazily compiled variant too
    assert _env("0.5Ti").matches(compile_selector(f'{c} == quantity("512Gi")'))
    assert not _env("0.5Ti").matches(compile_selector(f'{c} != quantity("512Gi")'))
    assert _env("1").matches(compile_selector('quantity("1000m") == quantity("1")'))
    assert _env("1").matches(
        compile_selector('[quantity("1"), quantity("1000m")].lastIndexOf(quantity("1")) == 1')
    )
    # sign is a global function
    assert _env("1").matches(compile_selector(f"sign({c}) == 1"))
    with pytest.raises(CelError):
        _env("1").matches(compile_selector(f"{c}.sign() == 1"))
