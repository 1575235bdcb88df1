"""Editing the JSON lists of an encoded answer in place (kubeacc/extender/splice.py)."""

from __future__ import annotations

import msgspec
import pytest

from kubeacc.extender.namelists import NameLists
from kubeacc.extender.server import encode_answer
from kubeacc.extender.splice import fit_list_is, spliced, string_end


def _filter_answer(passed: list[str], unresolvable: dict[str, str]) -> bytes:
    result = {
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
        "NodeNames": passed,
        "Nodes": None,
    }
    return encode_answer("filter", result, NameLists())


def test_the_fit_list_of_a_filter_answer_is_known_by_its_bytes() -> None:
    answer = _filter_answer(["n3", 'q"x', "n5"], {"[": "r"})
    assert fit_list_is(answer, msgspec.json.encode(["n3", 'q"x', "n5"]))
    for other in (["n5"], ["n3", 'q"x'], ["n3", 'q"x', "n5", "n6"], []):
        assert not fit_list_is(answer, msgspec.json.encode(other))
    # the same bytes elsewhere in the answer (ending where the list ends) are not the field
    start = answer.index(b'["')
    assert not fit_list_is(answer, answer[start : len(answer) - len(b',"Nodes":null}')])
    assert fit_list_is(_filter_answer([], {}), b"[]")
    assert not fit_list_is(b"[]", b"[]")


@pytest.mark.parametrize(
    ("text", "end"),
    [('"ab",', 4), ('"a\\"b",', 6), ('"a\\\\",', 5), ('"a\\\\\\"b"]', 8), ('"open', -1)],
)
def test_a_string_ends_at_its_first_quote_not_escaped(text: str, end: int) -> None:
    assert string_end(text.encode(), 1) == end


def test_entries_are_replaced_taken_out_and_put_in_with_their_commas() -> None:
    listing = b'["a","b","c"]'
    a, b, c = 1, 5, 9  # where each entry starts
    assert spliced(listing, 1, 12, []) == b'"a","b","c"'
    assert spliced(listing, 1, 12, [(b, 0, c - 1, b"")]) == b'"a","c"'
    assert spliced(listing, 1, 12, [(a, 0, b - 1, b""), (c, 0, 12, b"")]) == b'"b"'
    assert spliced(listing, 1, 12, [(b, 9, c - 1, b'"B"'), (b, 1, -1, b'"x"')]) == (
        b'"a","x","B","c"'
    )
    assert spliced(listing, 1, 12, [(12, 0, -1, b'"d"'), (a, 0, -1, b'"0"')]) == (
        b'"0","a","b","c","d"'
    )
    assert spliced(b"[]", 1, 1, [(1, 0, -1, b'"x"')]) == b'"x"'
