"""The status fields the controller owns: an AcceleratorPolicy's, and an AcceleratorOperation's
phase, message, conditions and dispatch (``status.results`` are the node agents').

All written by server-side apply under :data:`FIELD_MANAGER`, only when they changed; what the
API server returns goes into the controller's cache at once.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
from lightkube import Client
from lightkube.types import PatchType

from kubeacc.controller.elapsed import Elapsed
from kubeacc.crds.api import API_VERSION, OperationPhase
from kubeacc.crds.controlread import policy_status
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import AcceleratorPolicy
from kubeacc.crds.schemastructs import to_api
from kubeacc.crds.status import apply_operation_status, now, parse_time, set_condition
from kubeacc.crds.views import OperationStatusView
from kubeacc.crds.watch import WatchCache
from kubeacc.metrics.controller import ControllerMetrics

FIELD_MANAGER = "kubeacc-controller"
TERMINAL = (OperationPhase.SUCCEEDED, OperationPhase.FAILED)


def apply_policy_status(
    client: Client, cache: WatchCache, policy: dict[str, Any], cname: str, matched: int
) -> None:
    """The policy's class and how many Accelerators it selects, when that changed."""
    old = policy_status(policy.get("status") or {})
    gen = policy["metadata"].get("generation")
    new = to_api(
        msgspec.structs.replace(
            cast(msgspec.Struct, old),
            device_class_name=cname,
            matched_accelerators=matched,
            observed_generation=gen,
            conditions=set_condition(
                old.conditions, "Ready", True, "DeviceClassReady", f"DeviceClass {cname}", gen
            ),
        )
    )
    if new == to_api(old):
        return
    written = client.patch(
        AcceleratorPolicy.Status,
        policy["metadata"]["name"],
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": policy["metadata"]["name"]},
            "status": new,
        },
        patch_type=PatchType.APPLY,
        field_manager=FIELD_MANAGER,
        force=True,
    )
    cache.observe(written)


def operation_seconds(op: dict[str, Any], start_time: str, elapsed: Elapsed) -> float:
    """How long ``op`` ran, for the duration metric: its age since ``start_time`` as
    ``elapsed`` measures it (the dispatcher's, which times the operation out: a step of this
    process's clock once the start was seen changes nothing), and never less than zero (a
    start stamped by a replica whose clock was ahead)."""
    key = (op["metadata"].get("uid"), start_time)
    took = elapsed.age(key, parse_time(start_time))
    elapsed.forget(key)  # the operation is over
    return max(0.0, took)


class OperationStatusWriter:
    """Writes the operation status fields the controller owns; ``cache``: the operations';
    ``elapsed``: the operations' ages (the dispatcher's)."""

    def __init__(
        self,
        client: Client,
        cache: WatchCache,
        metrics: ControllerMetrics,
        elapsed: Elapsed | None = None,
    ) -> None:
        self.client = client
        self.cache = cache
        self.metrics = metrics
        self.elapsed = elapsed or Elapsed()

    def finish(
        self,
        op: dict[str, Any],
        status: OperationStatusView,
        phase: OperationPhase,
        reason: str,
        message: str,
    ) -> None:
        """End the operation in ``phase`` (``status`` is written by :meth:`apply`)."""
        gen = op["metadata"].get("generation")
        status.phase = phase
        status.message = message
        status.completion_time = now()
        action = str((op.get("spec") or {}).get("action", ""))
        self.metrics.completed.labels(action, phase.value).inc()
        if status.start_time:
            took = operation_seconds(op, status.start_time, self.elapsed)
            self.metrics.duration.labels(action, phase.value).observe(took)
        ok = phase == OperationPhase.SUCCEEDED
        status.conditions = set_condition(
            status.conditions, "Complete" if ok else "Failed", True, reason, message, gen
        )
        emit_event(self.client, op, reason, message, warning=not ok)

    def apply(
        self,
        op: dict[str, Any],
        before: OperationStatusView,
        status: OperationStatusView,
    ) -> None:
        """Write the fields the controller owns, when they changed (``before``, ``status``:
        schema Structs, kubeacc.crds.controlread)."""
        owned = to_api(status)
        owned.pop("results", None)  # the node agents' field
        old = to_api(before)
        old.pop("results", None)
        if owned == old:
            return
        self.cache.observe(apply_operation_status(self.client, op, owned, FIELD_MANAGER))
