"""Operation dispatch: an AcceleratorOperation from validation to its end.

A new operation is validated (:func:`kubeacc.controller.operations.validate`) against its targets
and the policies, read fresh from the API server (the caches may not have seen what was created
just before it), and refused when a target is in use unless it asks to drain first. A pending
operation cordons its targets when it drains, waits until nobody uses them, then is dispatched
to the node agents of the targets (``status.dispatch``); a running one ends when every target
has its result. An operation that outlives ``spec.timeoutSeconds`` fails, and a ``drainFirst``
operation lifts its own cordons when it ends, however it ends.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Collection
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.controller import taintrules
from kubeacc.controller.cordons import CORDONED_BY, Cordons
from kubeacc.controller.elapsed import Elapsed
from kubeacc.controller.operations import (
    ANY_NAMESPACE,
    Refusal,
    TargetView,
    attributable_results,
    busy,
    choose_targets,
    claim_holders,
    validate,
)
from kubeacc.controller.policyclasses import policy_specs
from kubeacc.controller.status import TERMINAL, OperationStatusWriter
from kubeacc.crds.api import API_VERSION, CONTROLLER_ACTIONS, Action, OperationPhase
from kubeacc.crds.controlread import InvalidSpec, dispatch_entries, operation_spec, operation_status
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import Accelerator, AcceleratorPolicy, as_dict, is_not_found
from kubeacc.crds.status import get_condition, now, parse_time, set_condition
from kubeacc.crds.views import (
    OperationSpecView,
    OperationStatusView,
    PolicySpecView,
    TargetSelectorView,
)
from kubeacc.crds.watch import WatchCache
from kubeacc.metrics.controller import ControllerMetrics

DRA_DRIVER = "kubeacc.io"
#: While an operation waits for consumers, it looks again at least this often (seconds): a
#: claim's reservation ending wakes no watch of the controller.
DRAIN_RECHECK_SECONDS = 2.0


def target_names(spec: OperationSpecView, status: OperationStatusView) -> list[str]:
    """The operation's targets: as recorded at its first sight (``status.targets``), else (an
    operation from before that field, or not yet seen) ``spec.targets``."""
    return list(status.targets or spec.targets or [])


class OperationDispatch:
    """Moves operations on; ``due_in(seconds)`` asks the loop for a pass that soon."""

    def __init__(
        self,
        client: Client,
        *,
        operations: WatchCache,
        accelerators: WatchCache,
        metrics: ControllerMetrics,
        cordons: Cordons,
        due_in: Callable[[float], None],
        admin_namespaces: Collection[str] = (ANY_NAMESPACE,),
    ) -> None:
        self.client = client
        #: Namespaces whose operations may target any device (the controller's own by
        #: default); others need an AcceleratorPolicy grant (operations.validate).
        self.admin_namespaces = tuple(admin_namespaces)
        self.accelerators = accelerators
        self.elapsed = Elapsed()
        self.status = OperationStatusWriter(client, operations, metrics, self.elapsed)
        self.metrics = metrics
        self.cordons = cordons
        self.due_in = due_in

    def _fresh(
        self, names: list[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, PolicySpecView]]:
        """A new operation's targets (GET) and the policies (LIST), read from the API server:
        the caches may not have seen what was created just before the operation."""
        found: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                found[name] = as_dict(self.client.get(Accelerator, name))
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
                continue
            self.accelerators.observe(found[name])
        return found, policy_specs([as_dict(p) for p in self.client.list(AcceleratorPolicy)])

    def _resolve(self, namespace: str, selector: TargetSelectorView) -> list[str] | Refusal:
        """What ``spec.targetSelector`` names now (LIST with its labels, then
        :func:`choose_targets`), or why it names nothing."""
        wanted = ",".join(f"{k}={v}" for k, v in sorted(selector.match_labels.items()))
        try:
            labels: dict[str, Any] = dict(selector.match_labels)
            found = [as_dict(a) for a in self.client.list(Accelerator, labels=labels)]
        except ApiError as exc:
            if exc.status.code in (400, 422):
                return Refusal("InvalidTargetSelector", f"spec.targetSelector: {exc}")
            raise
        if not found:
            return Refusal(
                "NoTargetMatched",
                f"no Accelerator is labelled {wanted} (see the labels with "
                "kubectl get accelerators --show-labels)",
            )
        views = {a["metadata"]["name"]: TargetView.parse(a) for a in found}
        policies = policy_specs([as_dict(p) for p in self.client.list(AcceleratorPolicy)])
        return choose_targets(
            namespace,
            list(views.values()),
            self._in_use(dict(views.items())),
            selector.max_targets,
            policies,
            self.admin_namespaces,
        )

    def _fail(
        self,
        op: dict[str, Any],
        before: OperationStatusView,
        status: OperationStatusView,
        refusal: Refusal,
    ) -> None:
        self.status.finish(op, status, OperationPhase.FAILED, refusal.reason, refusal.message)
        self.status.apply(op, before, status)

    def reconcile(
        self,
        op: dict[str, Any],
        policies: dict[str, PolicySpecView],
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        meta = op["metadata"]
        status = operation_status(op)
        if status.phase in TERMINAL:
            return
        before = copy.deepcopy(status)
        try:
            spec = operation_spec(op)
        except InvalidSpec as err:  # let in by a CRD without the schema or its rules
            status.start_time = status.start_time or now()
            self._fail(op, before, status, Refusal("InvalidSpec", spec_problems(err)))
            return
        gen = meta.get("generation")
        status.observed_generation = gen
        if status.phase is None and not status.targets:
            if spec.target_selector is None:
                status.targets = list(spec.targets or [])
            else:
                resolved = self._resolve(meta["namespace"], spec.target_selector)
                if isinstance(resolved, Refusal):
                    status.start_time = now()
                    self._fail(op, before, status, resolved)
                    return
                # Written before anything is done to them: a controller that restarts from
                # here on acts on exactly these, whatever the selector would match then.
                status.targets = resolved
                self.status.apply(op, before, status)
                before = copy.deepcopy(status)
                emit_event(
                    self.client, op, "TargetsChosen", f"targetSelector chose {', '.join(resolved)}"
                )
        names = target_names(spec, status)
        if status.phase is None:
            accelerators, policies = self._fresh(names)
        targets = {
            t: (TargetView.parse(accelerators[t]) if t in accelerators else None) for t in names
        }
        if status.phase is None:
            status.start_time = now()
            refusal = validate(meta["namespace"], spec, targets, policies, self.admin_namespaces)
            if refusal is None and not spec.drain_first and spec.action not in CONTROLLER_ACTIONS:
                in_use = self._in_use(targets)
                if in_use:
                    detail = "; ".join(f"{n} is used by {w}" for n, w in sorted(in_use.items()))
                    refusal = Refusal(
                        "DeviceInUse",
                        f"refusing {spec.action}: {detail} (set spec.drainFirst to wait "
                        "for them to finish)",
                    )
            if refusal is not None:
                self._fail(op, before, status, refusal)
                return
            status.phase = OperationPhase.PENDING
            status.message = "validated"
            status.conditions = set_condition(
                status.conditions, "Validated", True, "Validated", "targets and policy checked", gen
            )
            emit_event(self.client, op, "Validated", f"{spec.action} on {names}")
        if status.phase == OperationPhase.PENDING:
            self._pending(op, spec, status, targets)
        elif status.phase == OperationPhase.RUNNING:
            self._running(op, spec, status, accelerators)
        if status.phase not in TERMINAL:
            left = self._time_left(op, spec, status)
            draining = get_condition(status.conditions, "Draining")
            if left <= 0 and draining is not None and draining.status == "True":
                self.status.finish(
                    op,
                    status,
                    OperationPhase.FAILED,
                    "DrainTimeout",
                    f"still in use after {spec.timeout_seconds}s: {draining.message}",
                )
            elif left <= 0:
                self.status.finish(
                    op,
                    status,
                    OperationPhase.FAILED,
                    "Timeout",
                    f"not finished within {spec.timeout_seconds}s",
                )
            else:
                self.due_in(left + 0.05)
        if status.phase in TERMINAL and spec.drain_first and spec.action != Action.DRAIN:
            self._lift_cordons(op, target_names(spec, status), accelerators)
        self.status.apply(op, before, status)

    def _pending(
        self,
        op: dict[str, Any],
        spec: OperationSpecView,
        status: OperationStatusView,
        targets: dict[str, TargetView | None],
    ) -> None:
        gen = op["metadata"].get("generation")
        ref = f"{op['metadata']['namespace']}/{op['metadata']['name']}"
        if spec.action == Action.UNCORDON:
            self._uncordon(op, status, targets)
            return
        if spec.evict and not self._evict(op, status, targets, ref):
            return
        if spec.drain_first or spec.action == Action.DRAIN:
            for view in targets.values():
                if view is not None and not view.spec.cordoned:
                    self.cordons.set({"metadata": {"name": view.name}}, ref, True)
        in_use = self._in_use(targets)
        if in_use:
            detail = "; ".join(f"{n} is used by {w}" for n, w in sorted(in_use.items()))
            status.message = f"draining: {detail}"
            status.conditions = set_condition(
                status.conditions, "Draining", True, "WaitingForConsumers", detail, gen
            )
            self.due_in(DRAIN_RECHECK_SECONDS)
            return
        if get_condition(status.conditions, "Draining") is not None:
            status.conditions = set_condition(
                status.conditions, "Draining", False, "Drained", "no consumers left", gen
            )
        if spec.action == Action.DRAIN:
            self.status.finish(
                op,
                status,
                OperationPhase.SUCCEEDED,
                "Drained",
                "nobody uses the targets; they stay cordoned until an Uncordon operation",
            )
            return
        status.dispatch = dispatch_entries(
            {"accelerator": v.name, "node": v.spec.node, "deviceName": v.spec.device_name}
            for v in targets.values()
            if v is not None
        )
        status.phase = OperationPhase.RUNNING
        nodes = sorted({d.node for d in status.dispatch})
        status.message = f"handed to the node agents of {', '.join(nodes)}"
        status.conditions = set_condition(
            status.conditions, "Dispatched", True, "Dispatched", status.message, gen
        )
        emit_event(self.client, op, "Dispatched", status.message)

    def _running(
        self,
        op: dict[str, Any],
        spec: OperationSpecView,
        status: OperationStatusView,
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        results = attributable_results(status)
        done = {n: r for n, r in results.items() if r.phase in TERMINAL}
        wanted = {d.accelerator for d in status.dispatch}
        failed = {n: r for n, r in done.items() if r.phase == OperationPhase.FAILED}
        if not wanted <= set(done):
            status.message = f"{len(done)}/{len(wanted)} targets done"
            return
        if failed:
            first = sorted(failed.items())[0][1]
            msg = "; ".join(f"{n}: {r.message}" for n, r in sorted(failed.items()))
            self.status.finish(
                op,
                status,
                OperationPhase.FAILED,
                first.reason or "TargetFailed",
                msg,
            )
        else:
            self.status.finish(
                op,
                status,
                OperationPhase.SUCCEEDED,
                "Succeeded",
                f"{spec.action} done",
            )

    def _evict(
        self,
        op: dict[str, Any],
        status: OperationStatusView,
        targets: dict[str, TargetView | None],
        ref: str,
    ) -> bool:
        """The targets' DeviceTaintRules (:mod:`kubeacc.controller.taintrules`); False (and
        the operation Failed, the rules it made removed) where they are not served."""
        made: list[str] = []
        for view in targets.values():
            if view is None:
                continue
            try:
                created = taintrules.ensure(
                    self.client, view.name, view.spec.node, view.spec.device_name, ref
                )
            except taintrules.TaintRulesNotServed as exc:
                for name in made:
                    self._remove_rules(name, op)
                self.status.finish(
                    op, status, OperationPhase.FAILED, "DeviceTaintRulesNotServed", str(exc)
                )
                return False
            if created:
                made.append(view.name)
                self.metrics.taint_rules.labels("created").inc(len(created))
                also = len(created) - 1 if taintrules.rule_name(view.name) in created else 0
                more = f" and {also} of its MIG partitions/VFs" if also else ""
                emit_event(
                    self.client,
                    op,
                    "DeviceTaintRuleCreated",
                    f"{', '.join(created)}: {view.spec.device_name}{more} on "
                    f"{view.spec.node} tainted NoExecute, their pods are evicted",
                )
        return True

    def _remove_rules(self, accelerator: str, op: dict[str, Any]) -> list[str]:
        """Delete an Accelerator's drain rules: counted, and an Event on ``op``."""
        gone = taintrules.remove(self.client, accelerator)
        if gone:
            self.metrics.taint_rules.labels("deleted").inc(len(gone))
            emit_event(
                self.client,
                op,
                "DeviceTaintRuleDeleted",
                f"{', '.join(gone)}: {accelerator} no longer tainted by its drain",
            )
        return gone

    def _in_use(self, targets: dict[str, TargetView | None]) -> dict[str, str]:
        """Targets in use -> by whom: ``allocatedTo``, and reserved claims that hold them."""
        out = busy(targets)
        claims = [as_dict(c) for c in self.client.list(ResourceClaim, namespace="*")]
        for name, who in claim_holders(claims, targets, DRA_DRIVER).items():
            # allocatedTo already names the claims the agent prepared: each user once
            users = (out[name].split(", ") if name in out else []) + who.split(", ")
            out[name] = ", ".join(dict.fromkeys(users))
        return out

    def _uncordon(
        self,
        op: dict[str, Any],
        status: OperationStatusView,
        targets: dict[str, TargetView | None],
    ) -> None:
        lifted = []
        rules = []
        for view in targets.values():
            if view is not None:
                rules += self._remove_rules(view.name, op)
            if view is not None and view.spec.cordoned:
                self.cordons.set({"metadata": {"name": view.name}}, "", False)
                lifted.append(view.name)
                emit_event(
                    self.client,
                    {
                        "apiVersion": API_VERSION,
                        "kind": "Accelerator",
                        "metadata": {"name": view.name},
                    },
                    "Uncordoned",
                    f"{view.name}: new allocations allowed again",
                )
        message = f"uncordoned {', '.join(lifted)}" if lifted else "no target was cordoned"
        if rules:
            message += f"; DeviceTaintRules deleted: {', '.join(rules)}"
        self.status.finish(op, status, OperationPhase.SUCCEEDED, "Uncordoned", message)

    def _lift_cordons(
        self,
        op: dict[str, Any],
        names: list[str],
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        """Lift the cordons a drainFirst operation set, once it has ended."""
        ref = f"{op['metadata']['namespace']}/{op['metadata']['name']}"
        for name in names:
            acc = accelerators.get(name)
            if acc and (acc["metadata"].get("annotations") or {}).get(CORDONED_BY) == ref:
                self.cordons.set(acc, ref, False)
                self._remove_rules(name, op)

    def _time_left(
        self, op: dict[str, Any], spec: OperationSpecView, status: OperationStatusView
    ) -> float:
        """Seconds until the operation times out (infinite before it has started); a clock
        step of this process after the start was seen changes nothing (elapsed.py)."""
        if not status.start_time:
            return math.inf
        key = (op["metadata"].get("uid"), status.start_time)
        age = self.elapsed.age(key, parse_time(status.start_time))
        return float(spec.timeout_seconds) - age


def spec_problems(err: InvalidSpec) -> str:
    """What is wrong with an operation's spec, each problem with its field (at most three)."""
    more = len(err.problems) - 3
    return "; ".join(err.problems[:3]) + (f" (and {more} more)" if more > 0 else "")
