"""The operations' invariants (tests/faults/operations.py) fail on planted violations, so that
a clean fault run means something: an action recorded twice, a Succeeded with no action, an
action reported lost to a timeout, an action outside every operation, one on a held device."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from kubeacc.synthetic.kernel import record_action
from kubeacc.synthetic.profiles import build
from tests.faults.invariants import ClusterView, NodeView
from tests.faults.lifecycle import LifecycleProcess
from tests.faults.operations import Op, Operations, targets


def _ops(tmp_path: Path) -> Operations:
    host = build("kunlun-xpu", tmp_path / "host")
    agent = LifecycleProcess("n", host, tmp_path / "kc", tmp_path / "lib", tmp_path)
    agent.pids = {os.getpid()}
    return Operations(None, random.Random(1), targets("n", "kunlun-xpu", host), {"n": agent})


def _finish(ops: Operations, action_count: int, status: dict[str, object]) -> list[str]:
    target = ops.targets[0]
    op = Op("op", target, "Reset", ops._count(target), time.monotonic())
    ops.ops[op.name] = op
    for _ in range(action_count):
        record_action(target.host, "reset", target.key, "1")
    ops._finished(op, status)
    return [v.kind for v in ops.check(ClusterView([], [], {}, time.monotonic()))]


def _result(phase: str, reason: str) -> dict[str, object]:
    return {"phase": phase, "results": [{"phase": phase, "reason": reason}]}


def test_an_operation_is_held_to_one_action_and_a_true_outcome(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    assert _finish(ops, 1, _result("Succeeded", "Reset")) == []
    assert _finish(ops, 2, _result("Succeeded", "Reset")) == ["operation-twice"]
    assert _finish(ops, 0, _result("Succeeded", "Reset")) == ["operation-outcome"]
    assert _finish(ops, 1, _result("Failed", "AgentRestarted")) == []
    assert _finish(ops, 0, _result("Failed", "AgentRestarted")) == []
    assert _finish(ops, 0, _result("Failed", "DeviceInUse")) == []
    assert _finish(ops, 0, _result("Failed", "")) == ["operation-outcome"]
    timed_out = {
        "phase": "Failed",
        "results": [{"phase": "Running", "reason": "Running"}],
        "conditions": [{"type": "Failed", "reason": "Timeout"}],
    }
    assert _finish(ops, 1, timed_out) == ["operation-outcome"]  # it ran: the result was lost
    assert _finish(ops, 0, timed_out) == []
    # an action of a life-cycle agent outside every operation; another process's is not one
    assert [v.kind for v in ops.finish()] == []
    target = ops.targets[0]
    record_action(target.host, "reset", target.key, "1")
    assert [v.kind for v in ops.finish()] == ["operation-unattributed"]


def test_an_action_on_a_device_a_claim_held_throughout_is_found(tmp_path: Path) -> None:
    ops = _ops(tmp_path)
    target = ops.targets[0]
    claim = {"devices": [{"pool": "n", "device": target.device}]}
    held = ClusterView([], [], {"n": NodeView("n", {"uid-a": claim}, set())}, time.monotonic())
    free = ClusterView([], [], {"n": NodeView("n", {}, set())}, time.monotonic())
    assert ops.check(free) == []
    record_action(target.host, "reset", target.key, "1")
    assert ops.check(held) == []  # prepared after the check before the action: maybe later
    record_action(target.host, "reset", target.key, "1")
    assert [v.kind for v in ops.check(held)] == ["operation-on-held-device"]
    record_action(target.host, "reset", target.key, "1")
    assert ops.check(free) == []
