"""Renaming the calls the checker rejects, and the map insertion of a checked expression."""

from __future__ import annotations

from kubeacc.engine import celrewrite


def _message(line: int, col: int, name: str, args: str) -> str:
    return (
        f"INVALID_ARGUMENT: ERROR: <input>:{line}:{col}: found no matching overload for "
        f"'{name}' applied to '({args})'\n | ..."
    )


def test_renames_the_call_at_the_reported_position() -> None:
    expr = '[1].indexOf(1) == 0 && "ab".indexOf("b") == 1'
    got = celrewrite.rename_rejected_calls(expr, _message(1, 12, "indexOf", "list(int), int"))
    assert got == '[1].kubeacc_listIndexOf(1) == 0 && "ab".indexOf("b") == 1'


def test_renames_every_reported_call_across_lines_and_spaces() -> None:
    expr = "[1].lastIndexOf (1) == 0 &&\n  string(ip('::1')) == '::1'"
    msg = _message(1, 17, "lastIndexOf", "list(int), int") + _message(
        2, 9, "string", "kubeacc.cel.IP"
    )
    got = celrewrite.rename_rejected_calls(expr, msg)
    assert got == "[1].kubeacc_listLastIndexOf (1) == 0 &&\n  kubeacc_string(ip('::1')) == '::1'"


def test_other_rejections_are_left_alone() -> None:
    assert (
        celrewrite.rename_rejected_calls("string(b'a')", _message(1, 7, "string", "bytes")) is None
    )
    # a position that does not hold the call
    assert (
        celrewrite.rename_rejected_calls("x.indexOf(1)", _message(1, 3, "indexOf", "list(int)"))
        is None
    )


def test_internal_names_are_reported_as_written() -> None:
    assert celrewrite.own_name_used("kubeacc_string(1)") == "kubeacc_string"
    assert celrewrite.own_name_used("kubeacc(1)") is None
    msg = "no matching overload for 'kubeacc_listIndexOf' applied to '(list(double), int)'"
    assert celrewrite.public_message(msg) == msg.replace("kubeacc_listIndexOf", "indexOf")


def test_map_insert_keeps_the_length() -> None:
    data = b"\x0a\x0ecel.@mapInsert\x12\x01x"
    out = celrewrite.own_map_insert(data)
    assert len(out) == len(data) and b"kubeacc_mapIns" in out


def test_ordering_declares_the_cross_type_overloads() -> None:
    y = celrewrite.ORDERING_YAML
    for op in ("_<_", "_<=_", "_>_", "_>=_"):
        assert f"    - name: {op}\n" in y and f"  - name: {op}\n    overloads:" in y
    assert "id: less_int64_double" in y and "id: greater_equals_uint64_int64" in y
    assert "id: less_timestamp" in y
