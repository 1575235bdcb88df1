"""The kept answers (kubeacc/extender/answers.py): a node's change shows in the next answer."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from kubeacc.contracts.wants import CORES, GPU, MEMORY, pod_want
from kubeacc.extender.answers import Answers
from kubeacc.extender.placement import fit, plain_matcher, want_key
from kubeacc.extender.service import Extender
from kubeacc.extender.state import Gpu, State
from tests.extender.helpers import pod, reserve_at_random, share, small_gpu, state_with

A, B = "0000:01:00.0", "0000:02:00.0"


def args(p: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {"Pod": p, "NodeNames": names, "Nodes": None}


def test_a_reservation_changes_the_next_filter_and_prioritize_at_once() -> None:
    state = state_with({"n1": [small_gpu(A, 20000)], "n2": [small_gpu(A, 20000)]})
    ext = Extender(state)
    p = pod("p", {MEMORY: "8000"})
    assert ext.filter(args(p, ["n1", "n2"]))["NodeNames"] == ["n1", "n2"]
    before = ext.prioritize(args(p, ["n1", "n2"]))
    state.reserve("x", share("n1", A, 15000))
    out = ext.filter(args(p, ["n1", "n2"]))
    assert out["NodeNames"] == ["n2"]
    assert out["FailedNodes"] == {
        "n1": "no GPU with 8000 MiB free (most free on one GPU: 5000 MiB)"
    }
    assert ext.prioritize(args(p, ["n1", "n2"])) == [
        {"Host": "n1", "Score": 0},
        {"Host": "n2", "Score": before[1]["Score"]},
    ]
    state.release("x")
    assert ext.filter(args(p, ["n1", "n2"]))["NodeNames"] == ["n1", "n2"]
    assert ext.prioritize(args(p, ["n1", "n2"])) == before


def test_pod_events_and_inventory_changes_show_at_once() -> None:
    state = state_with({"n1": [small_gpu(A, 20000), small_gpu(B, 20000)]})
    ext = Extender(state)
    p = pod("p", {GPU: "2"})
    assert ext.filter(args(p, ["n1", "n2"]))["NodeNames"] == ["n1"]
    held = pod("h", {MEMORY: "10"}, node="n1", decision=share("n1", B, 10), phase="Running")
    state.pod_event(None, held)
    assert ext.filter(args(p, ["n1"]))["FailedNodes"] == {"n1": "2 whole GPU(s) wanted, 1 free"}
    state.pod_event(held, None)
    assert ext.filter(args(p, ["n1"]))["NodeNames"] == ["n1"]
    # a node appears, a GPU turns unhealthy, a node goes away
    state.set_node("n2", [small_gpu(A, 20000), small_gpu(B, 20000)])
    assert ext.filter(args(p, ["n1", "n2"]))["NodeNames"] == ["n1", "n2"]
    sick = Gpu(bdf=B, name="gpu-b", model="l4", memory=20000, numa=0, available=False)
    state.set_node("n1", [small_gpu(A, 20000), sick])
    assert ext.filter(args(p, ["n1", "n2"]))["NodeNames"] == ["n2"]
    state.remove_node("n2")
    out = ext.filter(args(p, ["n1", "n2"]))
    assert out["NodeNames"] == []
    assert out["FailedAndUnresolvableNodes"] == {"n2": "no kubeacc GPUs on this node"}
    assert ext.prioritize(args(p, ["n2"])) == [{"Host": "n2", "Score": 0}]


def test_a_reader_behind_the_trimmed_change_log_starts_over() -> None:
    state = state_with({"n1": [small_gpu(A, 20000)]})
    answers = Answers(state)
    want = pod_want(pod("p", {MEMORY: "8000"}))
    with state.lock:
        kind = answers.kind(want_key(want), lambda: plain_matcher(want))
    seen = kind.epoch
    for i in range(3000):  # far more changes than the log keeps for one node
        state.reserve("x", share("n1", A, 100 + i % 7))
    state.reserve("x", share("n1", A, 19000))
    assert state.changed_since(seen) is None
    with state.lock:
        kind = answers.kind(want_key(want), lambda: plain_matcher(want))
    assert kind.fails == {"n1": "no GPU with 8000 MiB free (most free on one GPU: 1000 MiB)"}
    assert kind.fits == {}


def _random_state(rng: random.Random, nodes: int) -> State:
    per_node = {
        f"n{i}": [
            small_gpu(
                f"0000:{b:02x}:00.0",
                rng.choice([16000, 24000]),
                rng.choice(["l4", "a100"]),
                numa=b % 2,
            )
            for b in range(rng.randint(0, 4))
        ]
        for i in range(nodes)
    }
    return state_with(per_node)


def test_kept_answers_equal_fresh_ones_through_random_changes() -> None:
    """Whatever happened to the state, the kept answers are the ones a fresh extender (and
    the per-node :func:`fit`) gives, and prioritize's bytes are those of encoding its list."""
    rng = random.Random(17)
    state = _random_state(rng, 12)
    ext = Extender(state)
    ext.answers.kinds = 3  # fewer kinds than pods below: answers are dropped and rebuilt
    pods = [
        pod("s", {MEMORY: "6000"}),
        pod("sc", {MEMORY: "3000", CORES: "40"}),
        pod("w1", {GPU: "1"}),
        pod("w2", {GPU: "2"}),
        pod("m", {MEMORY: "2000"}, annotations={"kubeacc.io/prefer-models": "a100,*"}),
        pod("two", {MEMORY: "9000"}, {GPU: "1"}),
    ]
    names = [*sorted(state.nodes), "cpu-only"]
    for step in range(300):
        node = rng.choice(sorted(state.nodes))
        view = state.nodes[node]
        action = rng.random()
        if action < 0.45 and view.gpus:
            reserve_at_random(state, rng, node)
        elif action < 0.8:
            state.release(f"u{rng.randint(0, 20)}")
        elif action < 0.9:
            state.set_node(node, _random_state(rng, 1).nodes["n0"].gpus.values())
        elif action < 0.95:
            state.remove_node(node)
        else:
            state.set_node(f"n{rng.randint(0, 14)}", [small_gpu(A, 24000)])
        p = rng.choice(pods)
        fresh = Extender(state)
        assert ext.filter(args(p, names)) == fresh.filter(args(p, names)), step
        got = ext.prioritize_json(args(p, names))
        want = pod_want(p)
        expected = [
            {"Host": n, "Score": fit(state.nodes[n], want).score if n in state.nodes else 0}
            for n in names
        ]
        assert got == msgspec.json.encode(expected), step


def test_prioritize_after_filter_joins_filters_pieces_only_while_nothing_changed() -> None:
    state = state_with({f"n{i}": [small_gpu(A, 20000)] for i in range(4)})
    ext = Extender(state)
    p = pod("p", {MEMORY: "8000"})
    state.reserve("x", share("n3", A, 15000))
    kept = ext.filter(args(p, ["n3", "n2", "gone", "n0"]))["NodeNames"]
    assert kept == ["n2", "n0"]
    kind = next(iter(ext.answers._kinds.values()))
    assert kind.filtered is not None and kind.filtered[1] == kept

    def fresh(names: list[str]) -> bytes:
        """What a new Answers over the same state answers (nothing remembered)."""
        with state.lock:
            ans = Answers(state)
            return ans.priorities(ans.kind(want_key(pod_want(p)), lambda: matcher(p)), names)

    # the same names (equal strings, other objects): the join, byte for byte a fresh answer
    assert ext.prioritize_json(args(p, [str(n) for n in ["n2", "n0"]])) == fresh(kept)
    # other names, or the same in another order: answered node by node
    assert ext.prioritize_json(args(p, ["n0", "n2"])) == fresh(["n0", "n2"])
    assert ext.prioritize_json(args(p, ["n2"])) == fresh(["n2"])
    # a change since filter: not the remembered pieces, the node's new answer
    state.reserve("y", share("n2", A, 15000))
    got = msgspec.json.decode(ext.prioritize_json(args(p, kept)))
    assert got == msgspec.json.decode(fresh(kept)) and got[0] == {"Host": "n2", "Score": 0}


def matcher(p: dict[str, Any]) -> Any:
    return plain_matcher(pod_want(p))
