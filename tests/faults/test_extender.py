"""The extender invariants of the fault runner fail on planted views (so that a clean run means
something), and the runner refuses the extender's kind or fault without the extender."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.wants import Assigned, Decision
from tests.faults import extender as E
from tests.faults.invariants import ClusterView, Tracker

BDF = "0000:01:00.0"


def _pod(
    name: str, node: str, memory: int, cores: int = 30, *, on: str = "", phase: str = "Running"
) -> dict[str, Any]:
    decision = Decision(on or node, (Assigned("main", (BDF,), memory=memory, cores=cores),))
    return {
        "metadata": {
            "name": f"{name}-{E.KIND}",
            "uid": f"uid-{name}",
            "annotations": {DECISION_ANNOTATION: decision.to_json()},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def _view(pods: list[dict[str, Any]]) -> ClusterView:
    return ClusterView([], pods, {}, time.monotonic())


def _state(memory: int = E.L4_MIB, used: int = 0, holders: tuple[str, ...] = ()) -> dict[str, Any]:
    gpu = {"model": "L4", "memory": memory, "used": {"memory": used, "cores": 0}}
    return {"gpus": {BDF: gpu}, "holders": list(holders)}


def test_a_clean_view_passes() -> None:
    pods = [_pod("a", "ext", 8000), _pod("b", "ext", 8000)]
    view = _view(pods)
    state = {"ext": _state(used=16000, holders=("uid-a", "uid-b"))}
    assert E.placement(view, {"ext"}) == []
    assert E.overcommit(view, state, {}) == []
    assert E.bookkeeping(view, state, Tracker(), 60) == []


def test_placement_off_the_extender_nodes_or_without_a_matching_decision_is_found() -> None:
    pods = [
        _pod("a", "other", 8000),  # not an extender node
        _pod("b", "ext", 8000, on="ext-2"),  # the decision names another node
        _pod("c", "ext", 4000),  # less than asked
        _pod("d", "ext", 8000, phase="Pending"),  # not Running: not held to it yet
    ]
    found = E.placement(_view(pods), {"ext"})
    assert [v.kind for v in found] == ["extender-placement"] * 3, found
    assert [v.detail.split()[0] for v in found] == [f"{n}-{E.KIND}" for n in "abc"]


def test_a_gpu_given_more_than_it_has_is_found_from_the_pods_and_from_the_extender() -> None:
    pods = [_pod(n, "ext", 8000, cores=40) for n in "abc"]  # 24000 MiB, 120 % of one L4
    found = E.overcommit(_view(pods), {}, {})
    assert sorted(v.detail for v in found) == [
        f"ext/{BDF}: pods bound hold 120 % of its cores",
        f"ext/{BDF}: pods bound hold 24000 MiB of {E.L4_MIB}",
    ]
    # a pod Failed or being deleted holds nothing
    pods[2]["status"]["phase"] = "Failed"
    assert E.overcommit(_view(pods), {}, {}) == []
    # the extender's own count past the GPU's memory
    found = E.overcommit(_view([]), {"ext": _state(used=E.L4_MIB + 1)}, {})
    assert [v.kind for v in found] == ["extender-overcommit"], found


def test_bookkeeping_that_disagrees_with_the_pods_bound_is_found_after_the_grace() -> None:
    pods = [_pod("a", "ext", 8000), _pod("b", "ext", 8000)]
    view = _view(pods)
    state = {"ext": _state(holders=("uid-a", "uid-gone"))}  # b bound, not counted; gone counted
    tracker = Tracker()
    assert E.bookkeeping(view, state, tracker, 60) == []
    view.at += 61
    found = E.bookkeeping(view, state, tracker, 60)
    assert sorted(v.detail for v in found) == [
        f"ext: b-{E.KIND} bound, not counted",
        "ext: pod uid-gone counted, not bound",
    ]


def test_the_extender_kind_and_fault_need_the_extender(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extender-kill need the extender"):
        E.ExtenderRun.of(None, None, {}, {}, tmp_path, 90, ["gpu", E.EXTENDER_KILL])  # type: ignore[arg-type]
    plan = E.Plan(tmp_path, 1, None, ())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a node of profile l4-extender"):
        E.ExtenderRun.of(None, plan, {"g": "dgx-h100"}, {}, tmp_path, 90, [E.KIND])  # type: ignore[arg-type]
    assert E.ExtenderRun.of(None, None, {}, {}, tmp_path, 90, ["gpu"]) is None  # type: ignore[arg-type]
