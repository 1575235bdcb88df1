"""Nodes grouped by signature (State.groups): a new kind of pod is answered once per signature,
and every node's answer is still the one its own summary gives."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import msgspec

from kubeacc.contracts.wants import (
    CORES,
    GPU,
    MEMORY,
    PREFER_ANNOTATION,
    UNITS,
    PodWant,
    pod_want,
)
from kubeacc.extender.answers import Answers
from kubeacc.extender.placement import grouping, plain_matcher, want_key
from kubeacc.extender.state import SIGNATURES, Gpu, NodeView, State
from tests.extender.helpers import pod, reserve_at_random, share, small_gpu, state_with

A, B, C = "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"


def gpu(bdf: str, memory: int, model: str = "l4", numa: int = 0) -> Gpu:
    return dataclasses.replace(small_gpu(bdf, memory, model, numa), units=memory // 100)


def random_gpus(rng: random.Random) -> list[Gpu]:
    return [
        gpu(f"0000:{b:02x}:00.0", rng.choice([16000, 24000]), rng.choice(["l4", "a100"]), b % 2)
        for b in range(rng.randint(0, 4))
    ]


def assert_groups_exact(state: State) -> None:
    """Each node is in the group of each of its signatures, as a fresh summary of it gives,
    and in no other; no group is empty."""
    expected: dict[str, dict[object, dict[str, None]]] = {k: {} for k in SIGNATURES}
    for name, view in state.nodes.items():
        again = NodeView(name, dict(view.gpus), dict(view.use))
        again.refresh()
        assert view.keys == again.keys, name  # a stale signature
        for sig, key in zip(SIGNATURES, again.keys, strict=True):
            expected[sig].setdefault(key, {})[name] = None
    got = {sig: {k: set(m) for k, m in g.items()} for sig, g in state.groups.items()}
    assert got == {sig: {k: set(m) for k, m in g.items()} for sig, g in expected.items()}


def per_node(state: State, want: PodWant) -> tuple[dict[str, int], dict[str, str]]:
    """Every node's answer for ``want``, node by node (no groups)."""
    match = plain_matcher(want)
    fits: dict[str, int] = {}
    fails: dict[str, str] = {}
    for name, view in state.nodes.items():
        score, reason = match(view)
        if reason:
            fails[name] = reason
        else:
            fits[name] = score
    return fits, fails


def assert_answers(answers: Answers, state: State, want: PodWant, step: object) -> None:
    with state.lock:
        kind = answers.kind(want_key(want), lambda: plain_matcher(want), grouping(want))
        fits, fails = per_node(state, want)
        assert (kind.fits, kind.fails) == (fits, fails), step
        # prioritize of what filter kept: its pieces (read from the table while a new kind's
        # are not built yet), then every piece
        passed = kind.filter(sorted(state.nodes, reverse=True))
        expected = [{"Host": n, "Score": fits[n]} for n in passed]
        assert answers.priorities(kind, passed) == msgspec.json.encode(expected), step
        assert kind.scored == {n: answers.piece(n, s) for n, s in fits.items()}, step


PODS: list[dict[str, Any]] = [
    pod("s", {MEMORY: "6000"}),
    pod("s2", {MEMORY: "16000"}),
    pod("sc", {MEMORY: "3000", CORES: "40"}),
    pod("sm", {MEMORY: "2000"}, annotations={PREFER_ANNOTATION: "a100,*"}),
    pod("smc", {MEMORY: "9000", CORES: "80"}, annotations={PREFER_ANNOTATION: "l4"}),
    pod("w1", {GPU: "1"}),
    pod("w2", {GPU: "2"}),
    pod("u", {UNITS: "300"}),
    pod("u2", {UNITS: "500"}),
]


def test_every_kind_of_pod_is_grouped_by_a_signature_or_answered_node_by_node() -> None:
    groups = [grouping(pod_want(p)) for p in PODS]
    assert groups == ["memory", "memory", "share", "share", "share", *["whole"] * 4]
    two = pod("two", {MEMORY: "9000"}, {GPU: "1"})
    assert grouping(pod_want(two)) is None  # place(): the node's GPUs one by one


def test_nodes_with_the_same_free_amounts_share_a_group_whatever_their_count() -> None:
    state = state_with(
        {
            "n1": [gpu(A, 20000), gpu(B, 20000)],
            "n2": [gpu(A, 20000), gpu(B, 20000), gpu(C, 20000)],
            "n3": [gpu(A, 20000), gpu(B, 30000)],
        }
    )
    memory = state.groups["memory"]
    assert sorted(sorted(m) for m in memory.values()) == [["n1", "n2"], ["n3"]]
    # the same free memory, other free cores: one memory group, two share groups
    state.reserve("x", share("n1", A, 5000, cores=50))
    state.reserve("y", share("n2", A, 5000))
    assert sorted(sorted(m) for m in memory.values()) == [["n1", "n2"], ["n3"]]
    assert all(len(m) == 1 for m in state.groups["share"].values())
    answers = Answers(state)
    assert_answers(answers, state, pod_want(pod("sc", {MEMORY: "10000", CORES: "60"})), "cores")
    with state.lock:
        want = pod_want(pod("sc", {MEMORY: "10000", CORES: "60"}))
        kind = answers.kind(want_key(want), lambda: plain_matcher(want), grouping(want))
    # n1's GPU of 15000 MiB has 50 % compute left: the share goes to its other one, looser
    assert kind.fits == {"n1": 5, "n2": 8, "n3": 7} and kind.fails == {}
    # the group follows the node: released, n1 answers as n2 again
    state.release("x")
    assert_groups_exact(state)
    assert_answers(Answers(state), state, want, "released")


def test_groups_and_grouped_answers_stay_exact_through_random_changes() -> None:
    """After every change: the groups are exactly the nodes' current signatures, and the
    answers of a new kind (one per signature) and of kinds kept since (node by node) are
    what each node's own summary answers."""
    rng = random.Random(30)
    state = state_with({f"n{i}": random_gpus(rng) for i in range(14)})
    kept = Answers(state)
    for step in range(400):
        node = rng.choice(sorted(state.nodes))
        view = state.nodes[node]
        action = rng.random()
        if action < 0.45 and view.gpus:
            reserve_at_random(state, rng, node)
        elif action < 0.75:
            state.release(f"u{rng.randint(0, 20)}")
        elif action < 0.85:
            state.set_node(node, random_gpus(rng))
        elif action < 0.92:
            state.remove_node(node)
        else:
            state.set_node(f"n{rng.randint(0, 16)}", random_gpus(rng))
        assert_groups_exact(state)
        p = rng.choice(PODS)
        fresh = pod_want(p)
        assert_answers(Answers(state), state, fresh, step)  # all at once, by signature
        assert_answers(kept, state, fresh, step)  # kept: the changed nodes re-answered
        size = pod_want(pod("cold", {MEMORY: str(rng.randint(500, 24000))}))
        assert_answers(Answers(state), state, size, step)
