"""Kept whole answers (kubeacc/extender/memo.py): given only while no node's answer changed."""

from __future__ import annotations

import http.client
import random
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from kubeacc.contracts.wants import GPU, MEMORY, Assigned, Decision
from kubeacc.extender import answers
from kubeacc.extender.memo import Ticket
from kubeacc.extender.namelists import NameLists
from kubeacc.extender.server import encode_answer
from kubeacc.extender.service import Extender
from kubeacc.extender.state import State
from tests.extender.helpers import pod, serving, small_gpu, state_with

A, B = "0000:01:00.0", "0000:02:00.0"
_encode = msgspec.json.encode


def share(node: str, bdf: str, memory: int) -> Decision:
    return Decision(node, (Assigned("c0", (bdf,), memory=memory),))


@pytest.fixture
def served() -> Iterator[tuple[Extender, http.client.HTTPConnection]]:
    state = state_with({f"n{i}": [small_gpu(A, 20000), small_gpu(B, 40000)] for i in range(6)})
    with serving(state) as served:
        yield served


def post(conn: http.client.HTTPConnection, verb: str, body: dict[str, Any]) -> bytes:
    conn.request("POST", f"/{verb}", _encode(body))
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status == 200, data
    return data


def fresh(state: State, verb: str, body: dict[str, Any]) -> bytes:
    """The answer of an extender that keeps nothing yet."""
    ext = Extender(state)
    if verb == "filter":
        return encode_answer(verb, ext.filter(body), NameLists())
    return ext.prioritize_json(body)


def test_a_repeated_request_gets_the_kept_answer_until_a_node_changes(
    served: tuple[Extender, http.client.HTTPConnection],
) -> None:
    ext, conn = served
    names = ["n3", "n0", "cpu-only", "n5", "n1"]
    body = {"Pod": pod("p", {MEMORY: "30000"}), "NodeNames": names, "Nodes": None}
    first = post(conn, "filter", body)
    assert post(conn, "filter", body) == first
    assert ext.counts["answers_kept_given"] == 1 and ext.counts["filter"] == 2
    kept = msgspec.json.decode(first)["NodeNames"]
    assert kept == ["n3", "n0", "n5", "n1"]
    prio = {**body, "NodeNames": kept}
    scores = post(conn, "prioritize", prio)
    assert post(conn, "prioritize", prio) == scores == fresh(ext.state, "prioritize", prio)
    assert ext.counts["answers_kept_given"] == 2
    # n0's big GPU is taken: n0 fits no more, and the very next answers say so
    ext.state.reserve("x", share("n0", B, 35000))
    after = post(conn, "filter", body)
    assert msgspec.json.decode(after)["NodeNames"] == ["n3", "n5", "n1"]
    assert after == fresh(ext.state, "filter", body)
    # filter's kept answer is mended (n0 moved from the names that fit to the refused)
    assert ext.counts["answers_kept_given"] == 3 and ext.counts["answers_mended"] == 1
    # prioritize's kept answer is mended: n0's piece replaced in place
    assert post(conn, "prioritize", prio) == fresh(ext.state, "prioritize", prio) != scores
    assert ext.counts["answers_kept_given"] == 4 and ext.counts["answers_mended"] == 2
    # a change that leaves every answer as it was (n1's small GPU was never a fit for 30000)
    # keeps the answers: the next filter is given the one just kept
    ext.state.reserve("y", share("n1", A, 1000))
    assert post(conn, "filter", body) == after
    assert ext.counts["answers_kept_given"] == 5 and ext.counts["answers_mended"] == 2


def test_other_names_and_other_pods_are_computed(
    served: tuple[Extender, http.client.HTTPConnection],
) -> None:
    ext, conn = served
    a = {"Pod": pod("p", {MEMORY: "30000"}), "NodeNames": ["n0", "n1"], "Nodes": None}
    post(conn, "filter", a)
    for other in (
        {**a, "NodeNames": ["n1", "n0"]},  # same names, other order: other bytes
        {**a, "Pod": pod("q", {GPU: "2"})},
        {**a, "Pod": pod("r", {MEMORY: "30001"})},
    ):
        assert post(conn, "filter", other) == fresh(ext.state, "filter", other)
    assert ext.counts["answers_kept_given"] == 0


def test_full_node_objects_are_never_answered_from_kept_answers(
    served: tuple[Extender, http.client.HTTPConnection],
) -> None:
    ext, conn = served
    p = pod("p", {MEMORY: "30000"})
    for items in ([{"metadata": {"name": "n0"}}], [{"metadata": {"name": "n1"}}]):
        body = {"Pod": p, "NodeNames": None, "Nodes": {"items": items}}
        got = msgspec.json.decode(post(conn, "filter", body))
        assert got["Nodes"]["items"] == items
    assert ext.counts["answers_kept_given"] == 0


def test_an_answer_computed_across_a_change_is_never_given() -> None:
    state = state_with({"n0": [small_gpu(A, 20000)], "n1": [small_gpu(A, 20000)]})
    ext = Extender(state)
    p = pod("p", {MEMORY: "15000"})
    ticket = ext.recall("filter", p, b'["n0","n1"]')
    assert isinstance(ticket, Ticket)
    state.reserve("x", share("n0", A, 10000))  # n0 stops fitting while it is computed
    ext.keep(ticket, b"computed before the change")
    again = ext.recall("filter", p, b'["n0","n1"]')
    assert isinstance(again, Ticket)
    ext.keep(again, b"current")
    assert ext.recall("filter", p, b'["n0","n1"]') == b"current"


def test_kept_answers_equal_fresh_ones_through_random_changes(
    served: tuple[Extender, http.client.HTTPConnection],
) -> None:
    ext, conn = served
    rng = random.Random(23)
    pods = [pod("s", {MEMORY: "15000"}), pod("w", {GPU: "1"}), pod("m", {MEMORY: "30000"})]
    names = [f"n{i}" for i in range(6)]
    for step in range(150):
        if rng.random() < 0.6:
            node = rng.choice(names)
            uid = f"u{rng.randint(0, 8)}"
            ext.state.release(uid)
            if rng.random() < 0.7:
                ext.state.reserve(uid, share(node, rng.choice([A, B]), rng.choice([5000, 25000])))
        body = {"Pod": rng.choice(pods), "NodeNames": names, "Nodes": None}
        got = post(conn, "filter", body)
        assert got == fresh(ext.state, "filter", body), step
        prio = {**body, "NodeNames": msgspec.json.decode(got)["NodeNames"]}
        assert post(conn, "prioritize", prio) == fresh(ext.state, "prioritize", prio), step
    assert ext.counts["answers_kept_given"] > 20


def test_a_new_score_keeps_filters_answer_and_mends_prioritizes(
    served: tuple[Extender, http.client.HTTPConnection],
) -> None:
    ext, conn = served
    body = {"Pod": pod("p", {MEMORY: "15000"}), "NodeNames": ["n0", "n1", "n2"], "Nodes": None}
    filtered = post(conn, "filter", body)
    scores = post(conn, "prioritize", body)
    # a replica bound to n0 takes part of its small GPU: n0 still fits, with another score
    ext.state.reserve("x", share("n0", A, 3000))
    assert post(conn, "filter", body) == filtered == fresh(ext.state, "filter", body)
    assert ext.counts["answers_kept_given"] == 1
    renewed = post(conn, "prioritize", body)
    assert renewed == fresh(ext.state, "prioritize", body) != scores
    assert ext.counts["answers_mended"] == 1  # n0's piece replaced in the kept answer


def test_mended_answers_equal_fresh_ones_through_many_changes_and_listed_twice(
    served: tuple[Extender, http.client.HTTPConnection], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prioritize of the same names after one, a few or many nodes changed (more than are
    mended, and a log trimmed), names unknown and listed twice: always the fresh answer."""
    monkeypatch.setattr(answers, "CHANGES", 4)  # the log of changes is trimmed often
    ext, conn = served
    rng = random.Random(5)
    p = pod("p", {MEMORY: "4000"})
    for names in (
        [f"n{i}" for i in range(6)] + ["cpu-only"],
        ["n1", "n2", "n1", "n3"],  # n1 twice: never mended
    ):
        body = {"Pod": p, "NodeNames": names, "Nodes": None}
        post(conn, "prioritize", body)
        for step in range(120):
            for _ in range(rng.choice([1, 2])):  # the kind moves on between two prioritizes
                for _ in range(rng.choice([1, 1, 2, 3, 20])):
                    uid = f"u{rng.randint(0, 30)}"
                    ext.state.release(uid)
                    if rng.random() < 0.8:
                        node = rng.choice([f"n{i}" for i in range(6)])
                        ext.state.reserve(
                            uid, share(node, rng.choice([A, B]), rng.randint(1, 9) * 2000)
                        )
                post(conn, "filter", body)
            assert post(conn, "prioritize", body) == fresh(ext.state, "prioritize", body), step
    assert ext.counts["answers_mended"] > 50
