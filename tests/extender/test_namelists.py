"""Node-name lists taken back by their bytes instead of decoded again."""

from __future__ import annotations

import msgspec
import pytest

from kubeacc.extender.namelists import NameLists

_encode = msgspec.json.encode


def test_a_kept_list_comes_back_as_a_copy_for_the_same_bytes_only() -> None:
    lists = NameLists()
    names = ["node-1", "node-2"]
    raw = msgspec.json.encode(names)
    lists.keep(raw, names)
    got = lists.decode(bytes(raw))  # equal bytes, another object
    assert got == names and got is not names and lists.hits == 1
    got.append("mine")  # the caller's copy: the kept list stays
    assert lists.decode(raw) == names and lists.hits == 2
    # the same names written otherwise are decoded, not taken back
    assert lists.decode(b'["node-1", "node-2"]') == names and lists.hits == 2


def test_other_lists_are_decoded_and_bad_ones_refused() -> None:
    lists = NameLists()
    assert lists.decode(b'["a","b"]') == ["a", "b"]
    assert lists.decode(b"null") is None
    with pytest.raises(msgspec.ValidationError, match=r"\$\[1\]"):
        lists.decode(b'["a",1]')
    with pytest.raises(msgspec.DecodeError):
        lists.decode(b'["a"')
    assert lists.hits == 0


def test_only_the_newest_lists_are_kept() -> None:
    lists = NameLists(keep=2)
    raws = [msgspec.json.encode([f"n{i}"]) for i in range(3)]
    for i, raw in enumerate(raws):
        lists.keep(raw, [f"n{i}"])
    assert lists.decode(raws[0]) == ["n0"] and lists.hits == 0  # dropped: decoded
    assert lists.decode(raws[2]) == ["n2"] and lists.decode(raws[1]) == ["n1"]
    assert lists.hits == 2


def test_filters_candidates_are_kept_when_asked_and_a_hit_becomes_the_newest() -> None:
    lists = NameLists(keep=2)
    every = _encode(["n1", "n2", "n3"])
    assert lists.decode(every, keep=True) == ["n1", "n2", "n3"] and lists.hits == 0
    got = lists.decode(bytes(every))
    assert got == ["n1", "n2", "n3"] and lists.hits == 1
    got.append("changed by the caller")  # a copy: what is kept stays as decoded
    lists.keep(_encode(["n1"]), ["n1"])
    assert lists.decode(every) == ["n1", "n2", "n3"] and lists.hits == 2  # now the newest
    lists.keep(_encode(["n2"]), ["n2"])  # drops ["n1"], the oldest, not the candidates
    assert lists.decode(every) == ["n1", "n2", "n3"] and lists.hits == 3
    assert lists.decode(_encode(["n1"])) == ["n1"] and lists.hits == 3
    assert lists.decode(b"null", keep=True) is None
