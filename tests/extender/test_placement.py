from __future__ import annotations

from kubeacc.contracts.wants import (
    CORES,
    GPU,
    MEMORY,
    MODELS_ANNOTATION,
    Assigned,
    Decision,
    pod_want,
)
from kubeacc.extender.placement import fit, matcher, place
from kubeacc.model import Device
from tests.extender.helpers import gpus, pod, small_gpu, state_with

A, B, C = "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"


def test_shares_pack_the_fullest_gpu_that_fits() -> None:
    state = state_with({"n": [small_gpu(A, 10000), small_gpu(B, 10000)]})
    state.reserve("x", Decision("n", (Assigned("c", (B,), memory=6000),)))
    view = state.node("n")
    assert view is not None
    want = pod_want(pod("p", {MEMORY: "3000"}))
    f = place(view, want)
    assert f.decision is not None and f.decision.containers[0].devices == (B,)
    # the summary-only answer agrees on feasibility and score
    assert matcher(want)(view) == (f.score, "")
    too_big = pod_want(pod("p", {MEMORY: "10001"}))
    assert (
        fit(view, too_big).reason == "no GPU with 10001 MiB free (most free on one GPU: 10000 MiB)"
    )


def test_a_tighter_fit_scores_higher() -> None:
    state = state_with({"empty": [small_gpu(A, 10000)], "used": [small_gpu(A, 10000)]})
    state.reserve("x", Decision("used", (Assigned("c", (A,), memory=5000),)))
    want = pod_want(pod("p", {MEMORY: "4000"}))
    empty, used = state.node("empty"), state.node("used")
    assert empty is not None and used is not None
    assert fit(used, want).score > fit(empty, want).score


def test_core_shares_are_limited_to_100_percent() -> None:
    state = state_with({"n": [small_gpu(A, 10000)]})
    state.reserve("x", Decision("n", (Assigned("c", (A,), memory=100, cores=70),)))
    view = state.node("n")
    assert view is not None
    assert "30% compute" not in fit(view, pod_want(pod("p", {CORES: "30"}))).reason
    assert fit(view, pod_want(pod("p", {CORES: "30"}))).reason == ""
    assert "31% compute" in fit(view, pod_want(pod("p", {MEMORY: "1", CORES: "31"}))).reason


def test_whole_gpus_take_untouched_gpus_on_one_numa_node(dgx: tuple[Device, ...]) -> None:
    state = state_with({"n": gpus(dgx)})
    view = state.node("n")
    assert view is not None
    numa = {g.bdf: g.numa for g in view.gpus.values()}
    # a share on a NUMA-0 GPU: that GPU is no longer whole
    shared = next(b for b, n in numa.items() if n == 0)
    state.reserve("x", Decision("n", (Assigned("c", (shared,), memory=10),)))
    view = state.node("n")
    assert view is not None
    f = place(view, pod_want(pod("p", {GPU: "4"})))
    assert f.decision is not None
    chosen = f.decision.containers[0].devices
    assert shared not in chosen
    assert len({numa[b] for b in chosen}) == 1 and f.score == 10
    assert fit(view, pod_want(pod("p", {GPU: "8"}))).reason == "8 whole GPU(s) wanted, 7 free"


def test_model_wishes_restrict_and_rank() -> None:
    state = state_with(
        {
            "mixed": [small_gpu(A, 20000, "a100"), small_gpu(B, 20000, "l4")],
            "l4-only": [small_gpu(A, 20000, "l4")],
            "v100": [small_gpu(A, 20000, "v100")],
        }
    )
    want = pod_want(pod("p", {MEMORY: "1000"}, annotations={MODELS_ANNOTATION: "a100,l4"}))
    mixed, l4, v100 = (state.node(n) for n in ("mixed", "l4-only", "v100"))
    assert mixed is not None and l4 is not None and v100 is not None
    best = place(mixed, want)
    assert best.decision is not None and best.decision.containers[0].devices == (A,)
    assert fit(mixed, want).score > fit(l4, want).score > 0
    assert fit(v100, want).reason == "no GPU of model a100, l4 (node has v100)"


def test_per_model_whole_gpus(dgx: tuple[Device, ...]) -> None:
    state = state_with({"n": [*gpus(dgx), small_gpu(C, 20000, "l4", numa=1)]})
    view = state.node("n")
    assert view is not None
    f = place(view, pod_want(pod("p", {"kubeacc.io/gpu-l4": "1"})))
    assert f.decision is not None and f.decision.containers[0].devices == (C,)
    assert (
        place(view, pod_want(pod("p", {"kubeacc.io/gpu-l4": "2"}))).reason
        == "2 whole GPU(s) of model l4 wanted, 1 free"
    )


def test_several_containers_fit_together_or_not_at_all() -> None:
    state = state_with({"n": [small_gpu(A, 10000), small_gpu(B, 10000)]})
    view = state.node("n")
    assert view is not None
    ok = place(view, pod_want(pod("p", {MEMORY: "6000"}, {MEMORY: "6000"}, {MEMORY: "4000"})))
    assert ok.decision is not None
    on = [c.devices[0] for c in ok.decision.containers]
    assert sorted(on[:2]) == [A, B] and on[2] in (A, B)
    no = place(view, pod_want(pod("p", {MEMORY: "6000"}, {MEMORY: "6000"}, {MEMORY: "6000"})))
    assert no.decision is None and "6000 MiB" in no.reason
