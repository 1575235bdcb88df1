from __future__ import annotations

import time

from kubeacc.contracts.wants import MEMORY, Assigned, Decision
from kubeacc.extender.state import PENDING_GRACE, best_fit
from tests.extender.helpers import pod, small_gpu, state_with

A, B = "0000:01:00.0", "0000:02:00.0"


def share(node: str, bdf: str, memory: int) -> Decision:
    return Decision(node, (Assigned("c0", (bdf,), memory=memory),))


def test_bound_pods_hold_their_decided_memory() -> None:
    state = state_with({"n1": [small_gpu(A, 1000), small_gpu(B, 2000)]})
    state.set_pods(
        [
            pod("p1", {MEMORY: "600"}, node="n1", decision=share("n1", A, 600)),
            pod("p2", {MEMORY: "100"}, node="n1", decision=share("n1", B, 100)),
            # not bound (yet), bound elsewhere, finished: none of them holds anything
            pod("p3", {MEMORY: "300"}, decision=share("n1", A, 300)),
            pod("p4", {MEMORY: "300"}, node="n2", decision=share("n1", A, 300)),
            pod("p5", {MEMORY: "300"}, node="n1", decision=share("n1", A, 300), phase="Failed"),
        ]
    )
    view = state.node("n1")
    assert view is not None
    assert view.use[A].memory == 600 and view.use[B].memory == 100
    assert view.free_sorted == (400, 1900) and view.max_free == 1900
    assert view.free_whole == 0
    assert best_fit(view, 300) == 400 and best_fit(view, 500) == 1900
    assert best_fit(view, 2000) is None


def test_events_add_and_remove_holdings() -> None:
    state = state_with({"n1": [small_gpu(A, 1000)]})
    p = pod("p1", {MEMORY: "600"}, node="n1", decision=share("n1", A, 600))
    state.pod_event(None, p)
    assert state.node("n1").use[A].memory == 600  # type: ignore[union-attr]
    done = {**p, "status": {"phase": "Succeeded"}}
    state.pod_event(p, done)
    assert state.node("n1").use[A].memory == 0  # type: ignore[union-attr]
    state.pod_event(None, p)
    state.pod_event(p, None)
    assert state.node("n1").use[A].memory == 0  # type: ignore[union-attr]


def test_a_reservation_survives_events_until_the_pod_shows_bound() -> None:
    state = state_with({"n1": [small_gpu(A, 1000)]})
    state.reserve("uid-p1", share("n1", A, 700))
    annotated = pod("p1", {MEMORY: "700"}, decision=share("n1", A, 700))
    state.pod_event(None, annotated)  # the annotation patch arrives before the binding
    assert state.node("n1").use[A].memory == 700  # type: ignore[union-attr]
    state.set_pods([annotated])  # a relist meanwhile keeps it too
    assert state.node("n1").use[A].memory == 700  # type: ignore[union-attr]
    bound = pod("p1", {MEMORY: "700"}, node="n1", decision=share("n1", A, 700))
    state.pod_event(annotated, bound)
    assert state.pending == {} and state.node("n1").use[A].memory == 700  # type: ignore[union-attr]
    state.release("uid-p1")
    assert state.node("n1").use[A].memory == 0  # type: ignore[union-attr]


def test_inventory_arriving_after_the_pods_counts_them() -> None:
    state = state_with({})
    state.set_pods([pod("p1", {MEMORY: "600"}, node="n1", decision=share("n1", A, 600))])
    state.set_node("n1", [small_gpu(A, 1000)])
    assert state.node("n1").use[A].memory == 600  # type: ignore[union-attr]
    unhealthy = small_gpu(A, 1000)
    state.set_node("n1", [unhealthy.__class__(**{**unhealthy.__dict__, "available": False})])
    assert state.node("n1").max_free == -1  # type: ignore[union-attr]


def test_a_reservation_whose_pod_event_never_comes_expires() -> None:
    # the bind ended, then the watch broke and the pod went away before the relist: no event
    # will ever name it; the reservation goes PENDING_GRACE s after the bind call ended
    state = state_with({"n1": [small_gpu(A, 1000)]})
    state.reserve("uid-gone", share("n1", A, 700))
    t0 = time.monotonic()
    state.bound("uid-gone", now=t0)
    state.set_pods([])  # the relist does not know the pod
    state.sweep(now=t0 + PENDING_GRACE / 2)
    assert state.node("n1").use[A].memory == 700  # type: ignore[union-attr]
    state.sweep(now=t0 + PENDING_GRACE + 1)
    assert state.node("n1").use[A].memory == 0  # type: ignore[union-attr]
    assert state.pending == {}
    # a bind still running is never swept
    state.reserve("uid-slow", share("n1", A, 500))
    state.sweep(now=1e9)
    assert state.node("n1").use[A].memory == 500  # type: ignore[union-attr]
