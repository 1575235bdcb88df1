"""cel.bind expansion."""

from __future__ import annotations

import pytest

from kubeacc.engine.celbind import BindError, expand_bind


def test_name_is_replaced_outside_strings_and_field_access() -> None:
    out = expand_bind('cel.bind(a, x.y, a.a == "a" && a > 1)')
    assert out == '((x.y).a == "a" && (x.y) > 1)'


def test_nested_binds_expand_innermost_first() -> None:
    assert expand_bind("cel.bind(x, 1, cel.bind(y, x + 1, y * x))") == "((((1) + 1) * (1)))"


def test_no_bind_is_unchanged() -> None:
    assert expand_bind('device.driver == "a"') == 'device.driver == "a"'


@pytest.mark.parametrize("bad", ["cel.bind(a, 1)", "cel.bind(a, 1, a", "cel.bind(1, 2, 3)"])
def test_malformed_bind_is_an_error(bad: str) -> None:
    with pytest.raises(BindError):
        expand_bind(bad)
