"""Units requests (kubeacc.io/gpu-units) and ranked models in the extender's placement."""

from __future__ import annotations

import pytest

from kubeacc.contracts.wants import (
    GPU,
    MEMORY,
    MIX_ANNOTATION,
    PREFER_ANNOTATION,
    UNITS,
    Assigned,
    Decision,
    PodWant,
    WantError,
    pod_want,
)
from kubeacc.extender.placement import fit, matcher, place
from kubeacc.extender.state import Gpu
from kubeacc.extender.unitsfit import choose
from kubeacc.model import Device
from tests.extender.helpers import gpus, pod, state_with

H100, L4, A100 = ("h100-80gb-hbm3", 989), ("l4", 121), ("a100-sxm4-40gb", 312)


def gpu(n: int, kind: tuple[str, int], numa: int = 0) -> Gpu:
    model, units = kind
    bdf = f"0000:{n:02x}:00.0"
    return Gpu(bdf, f"gpu-{n}", model, 20000, numa, True, units=units)


def want(units: int, **notes: str) -> PodWant:
    return pod_want(pod("p", {UNITS: str(units)}, annotations=notes))


def models_of(d: Decision, node: list[Gpu]) -> list[str]:
    by = {g.bdf: g.model for g in node}
    return [by[b] for b in d.containers[0].devices]


def test_fewest_gpus_then_least_waste_of_one_model() -> None:
    node = [gpu(1, H100), gpu(2, H100), gpu(3, L4), gpu(4, L4), gpu(5, L4)]
    view = state_with({"n": node}).node("n")
    assert view is not None
    for asked, expect in [(300, ["h100-80gb-hbm3"]), (1100, ["h100-80gb-hbm3"] * 2)]:
        f = place(view, want(asked))
        assert f.decision is not None and models_of(f.decision, node) == expect
        assert f.decision.containers[0].whole and f.decision.containers[0].units == asked
        assert matcher(want(asked))(view) == (f.score, "")
    # 240 units: one H100 (fewest GPUs) unless the pod ranks L4 first: then two L4s
    ranked = place(view, want(240, **{PREFER_ANNOTATION: "L4"}))
    assert ranked.decision is not None and models_of(ranked.decision, node) == ["l4", "l4"]
    # the least waste among models needing as many GPUs
    two = choose(600, {"a": 2, "b": 2}, {"a": 400, "b": 310}, want(600))
    assert two is not None and two.counts == (("b", 2),) and two.given == 620


def test_models_are_never_mixed_unless_the_pod_allows_it() -> None:
    node = [gpu(1, H100), gpu(2, L4)]
    view = state_with({"n": node}).node("n")
    assert view is not None
    f = fit(view, want(1100))
    assert f.reason == (
        "1100 units wanted, not reachable from one model "
        "(h100-80gb-hbm3: 1 free x 989, l4: 1 free x 121 units)"
    )
    assert place(view, want(1100)).decision is None
    mixed = place(view, want(1100, **{MIX_ANNOTATION: "true"}))
    assert mixed.decision is not None
    assert sorted(models_of(mixed.decision, node)) == ["h100-80gb-hbm3", "l4"]
    assert matcher(want(1100, **{MIX_ANNOTATION: "true"}))(view) == (mixed.score, "")
    # mixing still takes the fewest GPUs with the least waste
    got = choose(700, {"a": 3, "b": 4}, {"a": 400, "b": 310}, want(700, **{MIX_ANNOTATION: "true"}))
    assert got is not None and (got.gpus, got.given) == (2, 710)


def test_units_hold_their_gpus_whole() -> None:
    node = [gpu(1, H100), gpu(2, H100)]
    state = state_with({"n": node})
    view = state.node("n")
    assert view is not None
    f = place(view, want(900))
    assert f.decision is not None
    state.reserve("u", f.decision)
    view = state.node("n")
    assert view is not None
    taken = f.decision.containers[0].devices[0]
    share = place(view, pod_want(pod("s", {MEMORY: "1000"})))
    assert share.decision is not None and share.decision.containers[0].devices[0] != taken
    assert fit(view, want(1000)).reason.startswith("1000 units wanted, not reachable")
    assert fit(view, pod_want(pod("w", {GPU: "2"}))).reason == "2 whole GPU(s) wanted, 1 free"


def test_units_prefer_one_numa_node(dgx: tuple[Device, ...]) -> None:
    node = gpus(dgx)
    view = state_with({"n": node}).node("n")
    assert view is not None
    f = place(view, want(3000))  # 4 H100s: one NUMA node has 4 (GPU 7 is in MIG mode)
    assert f.decision is not None
    numas = {g.numa for g in node if g.bdf in f.decision.containers[0].devices}
    assert len(f.decision.containers[0].devices) == 4 and len(numas) == 1


def test_gpus_without_units_serve_no_units_request() -> None:
    view = state_with({"n": [gpu(1, ("mi210", 0))]}).node("n")
    assert view is not None
    assert fit(view, want(10)).reason == "10 units wanted: no unit table entry for mi210"


def test_preference_scores_nodes_by_the_best_model_they_can_give() -> None:
    state = state_with({"h": [gpu(1, H100)], "l": [gpu(1, L4), gpu(2, L4)], "a": [gpu(1, A100)]})
    wish = pod_want(pod("p", {GPU: "1"}, annotations={PREFER_ANNOTATION: "H100,L4"}))
    h, l4, a = state.node("h"), state.node("l"), state.node("a")
    assert h is not None and l4 is not None and a is not None
    assert fit(h, wish).score > fit(l4, wish).score > 0
    assert fit(a, wish).reason == "1 whole GPU(s) wanted, 0 free"
    # filter allows the fallback once the first choice is taken
    state.reserve("x", Decision("h", (Assigned("c", ("0000:01:00.0",), whole=True),)))
    h = state.node("h")
    assert h is not None and fit(h, wish).reason
    anything = pod_want(pod("p", {GPU: "1"}, annotations={PREFER_ANNOTATION: "H100,*"}))
    assert fit(a, anything).score > 0 and fit(a, anything).score < fit(l4, wish).score + 3


def test_bind_takes_the_best_ranked_model_of_the_node() -> None:
    node = [gpu(1, L4), gpu(2, H100), gpu(3, A100)]
    view = state_with({"n": node}).node("n")
    assert view is not None
    for wish, model in [("A100,H100", "a100-sxm4-40gb"), ("H100,A100", "h100-80gb-hbm3")]:
        f = place(view, pod_want(pod("p", {GPU: "1"}, annotations={PREFER_ANNOTATION: wish})))
        assert f.decision is not None and models_of(f.decision, node) == [model]
    f = place(view, want(200, **{PREFER_ANNOTATION: "L4, A100"}))
    assert f.decision is not None and models_of(f.decision, node) == ["a100-sxm4-40gb"]


@pytest.mark.parametrize(
    ("limits", "notes", "message"),
    [
        ({UNITS: "10", GPU: "1"}, {}, "units are served as whole GPUs"),
        ({UNITS: "10", MEMORY: "100"}, {}, "units are served as whole GPUs"),
        ({UNITS: "1.5"}, {}, "must be a whole number"),
        ({UNITS: "10"}, {MIX_ANNOTATION: "yes"}, 'kubeacc.io/mix-models: "true" or "false"'),
        ({UNITS: "10"}, {PREFER_ANNOTATION: "*,H100"}, "must come last"),
    ],
)
def test_bad_units_requests(limits: dict[str, str], notes: dict[str, str], message: str) -> None:
    with pytest.raises(WantError, match=message):
        pod_want(pod("p", limits, annotations=notes))


def test_the_clusters_default_ranking_applies_to_pods_that_name_none() -> None:
    from kubeacc.units.table import parse, use_table

    state = state_with({"h": [gpu(1, H100)], "l": [gpu(1, L4)]})
    h, l4 = state.node("h"), state.node("l")
    assert h is not None and l4 is not None
    try:
        use_table(parse({"preferModels": "L4"}))
        plain = pod_want(pod("p", {GPU: "1"}))
        assert fit(l4, plain).score > fit(h, plain).score > 0  # H100 still allowed, ranked last
        own = pod_want(pod("p", {GPU: "1"}, annotations={PREFER_ANNOTATION: "H100"}))
        assert fit(h, own).score > 0 and fit(l4, own).reason
        opt_out = pod_want(pod("p", {GPU: "1"}, annotations={PREFER_ANNOTATION: ""}))
        assert opt_out.prefer.empty
    finally:
        use_table(None)
