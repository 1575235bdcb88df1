"""Which decisions count: only those consistent with the pod's own requests."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.contracts.trusted import decision_problem, trusted_decision
from kubeacc.contracts.wants import DECISION_ANNOTATION, Assigned, Decision
from kubeacc.extender.state import Gpu, State

MEMORY = "kubeacc.io/gpu-memory"
CORES = "kubeacc.io/gpu-cores"
GPU = "kubeacc.io/gpu"
A, B = "0000:01:00.0", "0000:02:00.0"


def _pod(limits: dict[str, str], decision: Decision | str | None, node: str = "n1") -> Any:
    text = decision.to_json() if isinstance(decision, Decision) else decision
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "annotations": {DECISION_ANNOTATION: text} if text else {},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"limits": limits}}],
        },
        "status": {"phase": "Running"},
    }


def _share(memory: int, cores: int = 0, devices: tuple[str, ...] = (A,)) -> Decision:
    return Decision("n1", (Assigned("main", devices, memory=memory, cores=cores),))


def test_what_the_extender_decides_is_consistent() -> None:
    assert decision_problem(_pod({MEMORY: "1024", CORES: "30"}, None), _share(1024, 30)) is None
    whole = Decision("n1", (Assigned("main", (A, B), whole=True),))
    assert decision_problem(_pod({GPU: "2"}, None), whole) is None


@pytest.mark.parametrize(
    ("limits", "decision", "reason"),
    [
        # a 1 MiB request with every GPU of the node
        ({MEMORY: "1"}, _share(1, devices=(A, B)), "decided whole GPUs"),
        ({MEMORY: "1"}, Decision("n1", (Assigned("main", (A, B), whole=True),)), "whole GPUs"),
        # no GPU request and a whole GPU
        ({}, Decision("n1", (Assigned("main", (A,), whole=True),)), "asks for no GPU"),
        # negative shares: the extender would over-commit
        ({MEMORY: "1"}, _share(-75000), "negative"),
        ({MEMORY: "1024"}, _share(20000), "decided 20000 MiB"),
        ({CORES: "10"}, _share(0, cores=-90), "negative"),
        ({GPU: "1"}, Decision("n1", (Assigned("main", (A, B), whole=True),)), "decided 2"),
        ({GPU: "1"}, _share(0, devices=(A,)), "decided a share"),
        ({MEMORY: "1"}, Decision("n2", (Assigned("main", (A,), memory=1),)), "bound to 'n1'"),
        ({MEMORY: "1"}, Decision("n1", ()), "names no container"),
        ({MEMORY: "1"}, _share(1, devices=(A, A)), "one GPU twice"),
    ],
)
def test_forged_decisions_are_refused(
    limits: dict[str, str], decision: Decision, reason: str
) -> None:
    problem = decision_problem(_pod(limits, None), decision)
    assert problem is not None and reason in problem


def test_an_unreadable_annotation_is_no_decision() -> None:
    assert trusted_decision(_pod({MEMORY: "1"}, "{not json")) == (
        None,
        f"{DECISION_ANNOTATION} is not a kubeacc decision",
    )
    assert trusted_decision(_pod({MEMORY: "1"}, None)) == (None, None)


def test_the_extender_does_not_count_forged_decisions() -> None:
    state = State()
    state.set_node("n1", [Gpu(A, "gpu-a", "l4", 23034, 0, True)])
    forged = _pod({MEMORY: "1"}, _share(-75000))
    blocker = _pod({}, Decision("n1", (Assigned("main", (A,), whole=True),)))
    blocker["metadata"]["uid"] = "u2"
    state.set_pods([forged, blocker])
    view = state.nodes["n1"]
    assert view.use[A].memory == 0 and not view.use[A].whole
    assert view.max_free == 23034 and view.free_whole == 1
    state.pod_event(None, _pod({MEMORY: "1024"}, _share(1024)))
    assert state.nodes["n1"].use[A].memory == 1024
