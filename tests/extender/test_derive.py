"""Prioritize's answer derived from a kept one of a list a few names apart
(kubeacc/extender/derive.py): the same bytes as a fresh extender's, through random binds,
releases, nodes gone and back and candidate lists that change, over HTTP."""

from __future__ import annotations

import contextlib
import http.client
import random
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from kubeacc.contracts.wants import GPU, MEMORY, pod_want
from kubeacc.extender import answers, service
from kubeacc.extender.answers import Answers, Kind
from kubeacc.extender.memo import Kept
from kubeacc.extender.service import BindError, Extender
from tests.extender.helpers import pod, reserve_at_random, serving, share, small_gpu, state_with
from tests.extender.test_memo import fresh, post

A, B = "0000:01:00.0", "0000:02:00.0"
#: Node names JSON escapes or that hold a list's delimiters (read back as the next name).
ODD = ['q"x', "b\\", "c,d", "e]"]
NODES = [f"n{i}" for i in range(26)] + ODD


def node_gpus(i: int) -> list[Any]:
    return [small_gpu(A, 20000), small_gpu(B, 40000 if i % 2 else 30000)]


@pytest.fixture
def derived(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes, bytes | None]]:
    """(the kept answer's names, the names asked, what ``derive`` gave) of each call."""
    got: list[tuple[bytes, bytes, bytes | None]] = []
    real = service.derive

    def spy(answers: Answers, kind: Kind, kept: Kept, names: bytes) -> bytes | None:
        out = real(answers, kind, kept, names)
        got.append((kept.names, names, out))
        return out

    monkeypatch.setattr(service, "derive", spy)
    return got


@pytest.fixture
def served() -> Iterator[tuple[Extender, http.client.HTTPConnection]]:
    with serving(state_with({n: node_gpus(i) for i, n in enumerate(NODES)})) as served:
        yield served


def _bind(ext: Extender, p: dict[str, Any], scores: bytes, uid: str) -> None:
    """The replica ``p`` bound to the node prioritize scored best, as kube-scheduler does."""
    listed = msgspec.json.decode(scores)
    if listed:
        best = max(listed, key=lambda h: h["Score"])["Host"]
        replica = {**p, "metadata": {**p["metadata"], "uid": uid}}
        with contextlib.suppress(BindError):  # a name the scheduler made up: not bound
            ext.decide(replica, pod_want(replica), best)


def test_derived_answers_equal_fresh_ones_through_random_binds(
    served: tuple[Extender, http.client.HTTPConnection],
    derived: list[tuple[bytes, bytes, bytes | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answers, "CHANGES", 24)  # the log of changes is trimmed now and then
    ext, conn = served
    state = ext.state
    rng = random.Random(7)
    names = [*NODES, "cpu-only", "gone"]
    rng.shuffle(names)
    pods = [pod("s", {MEMORY: "15000"}), pod("m", {MEMORY: "30000"}), pod("w", {GPU: "1"})]
    for step in range(500):
        for _ in range(rng.choice([0, 1, 1, 2, 3, 20 if rng.random() < 0.05 else 1])):
            node = rng.choice(NODES)
            roll = rng.random()
            if roll < 0.04 and node in state.nodes:
                state.remove_node(node)
            elif node not in state.nodes:
                state.set_node(node, node_gpus(NODES.index(node)))
            elif roll < 0.5:
                state.release(f"u{rng.randint(0, 60)}")
            else:
                reserve_at_random(state, rng, node)
        candidates = list(names)
        if rng.random() < 0.1:  # the scheduler's own filters left a node out this time
            candidates.remove(rng.choice(NODES))
        p = rng.choice(pods)
        body = {"Pod": p, "NodeNames": candidates, "Nodes": None}
        got = post(conn, "filter", body)
        assert got == fresh(state, "filter", body), step
        fit = msgspec.json.decode(got)["NodeNames"]
        if fit and rng.random() < 0.05:  # a list no filter answered: never derived
            fit.pop(rng.randrange(len(fit)))
        prio = {**body, "NodeNames": fit}
        scores = post(conn, "prioritize", prio)
        assert scores == fresh(state, "prioritize", prio), step
        _bind(ext, p, scores, f"u{rng.randint(0, 60)}")
    given = [(old, new) for old, new, out in derived if out is not None]
    assert len(given) > 150 and ext.counts["answers_derived"] == len(given)
    assert any(len(new) > len(old) for old, new in given)  # names put in
    assert any(len(new) < len(old) for old, new in given)  # names taken out
    assert any(
        any(msgspec.json.encode(n) in new for n in ODD) for _, new in given
    )  # past names that escape or hold delimiters
    assert len(given) < len(derived)  # and lists apart in other names were computed


def test_a_bound_node_taken_out_and_put_back(
    served: tuple[Extender, http.client.HTTPConnection],
) -> None:
    ext, conn = served
    body = {"Pod": pod("m", {MEMORY: "35000"}), "NodeNames": NODES[:8], "Nodes": None}
    fit = msgspec.json.decode(post(conn, "filter", body))["NodeNames"]
    assert fit[0] == "n1" and fit[-1] == "n7"  # n1, n3, n5, n7: the 40,000 MiB GPUs
    first = post(conn, "prioritize", {**body, "NodeNames": fit})
    for node, moved in (("n1", "first"), ("n3", "middle"), ("n7", "last")):
        ext.state.reserve("x", share(node, B, 35000))  # a replica bound: it fits no more
        after = msgspec.json.decode(post(conn, "filter", body))["NodeNames"]
        assert after == [n for n in fit if n != node], moved
        prio = {**body, "NodeNames": after}
        assert post(conn, "prioritize", prio) == fresh(ext.state, "prioritize", prio), moved
        ext.state.release("x")  # fits again: back in its place
        assert msgspec.json.decode(post(conn, "filter", body))["NodeNames"] == fit
        assert post(conn, "prioritize", {**body, "NodeNames": fit}) == first, moved
    assert ext.counts["answers_derived"] == 6


def test_names_no_filter_answer_gave_are_computed(
    served: tuple[Extender, http.client.HTTPConnection],
    derived: list[tuple[bytes, bytes, bytes | None]],
) -> None:
    ext, conn = served
    body = {"Pod": pod("m", {MEMORY: "35000"}), "NodeNames": NODES[:8], "Nodes": None}
    fit = msgspec.json.decode(post(conn, "filter", body))["NodeNames"]
    post(conn, "prioritize", {**body, "NodeNames": fit})
    ext.state.reserve("x", share("n3", B, 35000))
    # the filter answer without n3 was never asked for: this list is not one of ours
    prio = {**body, "NodeNames": [n for n in fit if n != "n3"]}
    assert post(conn, "prioritize", prio) == fresh(ext.state, "prioritize", prio)
    assert derived == [] and ext.counts["answers_derived"] == 0


@pytest.mark.parametrize("name", [",x", "]x", " x"])
def test_a_name_that_starts_with_a_delimiter_is_never_derived(
    name: str, derived: list[tuple[bytes, bytes, bytes | None]]
) -> None:
    """After a ``[`` or ``,`` such a name could be the end of the entry before it."""
    nodes = {n: node_gpus(1) for n in ("a,", name, "b")}
    with serving(state_with(nodes)) as (ext, conn):
        body = {"Pod": pod("m", {MEMORY: "35000"}), "NodeNames": list(nodes), "Nodes": None}
        post(conn, "prioritize", {**body, "NodeNames": list(nodes)})
        ext.state.reserve("x", share(name, B, 35000))
        fit = msgspec.json.decode(post(conn, "filter", body))["NodeNames"]
        prio = {**body, "NodeNames": fit}
        assert post(conn, "prioritize", prio) == fresh(ext.state, "prioritize", prio)
    assert [out for _, _, out in derived] == [None]
