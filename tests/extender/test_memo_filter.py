"""Filter's kept answer mended in place (``Answers.mend_filter``): the same bytes as a fresh
extender's answer, through random binds, releases, nodes gone and back, over HTTP."""

from __future__ import annotations

import http.client
import random
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from kubeacc.contracts.wants import GPU, MEMORY, PREFER_ANNOTATION
from kubeacc.extender.answers import Answers, Kind
from kubeacc.extender.service import Extender
from tests.extender.helpers import pod, reserve_at_random, serving, share, small_gpu, state_with
from tests.extender.test_memo import fresh, post

A, B = "0000:01:00.0", "0000:02:00.0"
#: A model whose name JSON escapes: refusals that name it end in escaped quotes.
ODD = 'x"y\\'


def node_gpus(i: int) -> list[Any]:
    return [small_gpu(A, 20000, ODD if i % 3 == 0 else "l4"), small_gpu(B, 40000)]


@pytest.fixture
def mends(monkeypatch: pytest.MonkeyPatch) -> list[bytes | None]:
    """What each ``Answers.mend_filter`` call gave (None: computed anew instead)."""
    got: list[bytes | None] = []
    real = Answers.mend_filter

    def spy(self: Answers, kind: Kind, *args: Any) -> bytes | None:
        out = real(self, kind, *args)
        got.append(out)
        return out

    monkeypatch.setattr(Answers, "mend_filter", spy)
    return got


@pytest.fixture
def served() -> Iterator[tuple[Extender, http.client.HTTPConnection]]:
    with serving(state_with({f"n{i}": node_gpus(i) for i in range(30)})) as served:
        yield served


def test_mended_filter_answers_equal_fresh_ones_through_random_binds(
    served: tuple[Extender, http.client.HTTPConnection], mends: list[bytes | None]
) -> None:
    ext, conn = served
    state = ext.state
    rng = random.Random(11)
    nodes = [f"n{i}" for i in range(30)]
    names = [*nodes, "cpu-only", "gone"]
    rng.shuffle(names)
    pods = [
        pod("s", {MEMORY: "15000"}),
        pod("m", {MEMORY: "30000"}),
        pod("w", {GPU: "1"}),
        pod("h", {MEMORY: "8000"}, annotations={PREFER_ANNOTATION: "h100"}),
    ]
    for step in range(400):
        for _ in range(rng.choice([1, 1, 2, 3])):
            node = rng.choice(nodes)
            roll = rng.random()
            if roll < 0.05 and node in state.nodes:
                state.remove_node(node)  # its entry becomes unresolvable
            elif node not in state.nodes:
                state.set_node(node, node_gpus(int(node[1:])))
            elif roll < 0.35:
                state.release(f"u{rng.randint(0, 20)}")
            else:
                reserve_at_random(state, rng, node)
        body = {"Pod": rng.choice(pods), "NodeNames": names, "Nodes": None}
        got = post(conn, "filter", body)
        assert got == fresh(state, "filter", body), step
        prio = {**body, "NodeNames": msgspec.json.decode(got)["NodeNames"]}
        assert post(conn, "prioritize", prio) == fresh(state, "prioritize", prio), step
    # most changed filter answers were mended: with unresolvable nodes and escaped reasons
    assert sum(m is not None for m in mends) > 150
    decoded = [msgspec.json.decode(m) for m in mends if m is not None]
    assert any(d["FailedAndUnresolvableNodes"].keys() - {"cpu-only", "gone"} for d in decoded)
    assert any(ODD in r for d in decoded for r in d["FailedNodes"].values())


def test_a_filter_answer_is_mended_for_a_bind_and_kept_after(
    served: tuple[Extender, http.client.HTTPConnection], mends: list[bytes | None]
) -> None:
    ext, conn = served
    names = [f"n{i}" for i in range(30)]
    body = {"Pod": pod("m", {MEMORY: "30000"}), "NodeNames": names, "Nodes": None}
    first = post(conn, "filter", body)
    assert "n4" in msgspec.json.decode(first)["NodeNames"]
    ext.state.reserve("x", share("n4", B, 35000))  # a replica bound: n4 fits no more
    mended = post(conn, "filter", body)
    assert mended == fresh(ext.state, "filter", body) != first
    assert "n4" in msgspec.json.decode(mended)["FailedNodes"]
    assert len(mends) == 1 and mends[0] == mended
    assert post(conn, "filter", body) == mended and len(mends) == 1  # kept as it is now
    ext.state.release("x")  # n4 fits again: back in its place among the names
    assert post(conn, "filter", body) == first and len(mends) == 2
