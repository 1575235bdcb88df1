"""The controller: a level-triggered reconcile loop under Lease leader election.

Every pass looks at the whole picture (policies, Accelerators, operations, Nodes, the
DeviceClasses it generated) and moves each object one step toward what it should be. A pass that
is interrupted (crash, lost leadership) leaves nothing that the next pass cannot finish: every
write is idempotent.

Passes are driven by watches, not by a timer: operations, policies, Accelerators and Nodes are
held in watch-fed caches (:class:`kubeacc.crds.watch.WatchCache`), and any change marks the
controller dirty. A pass runs when something changed (at most one every ``interval`` seconds,
so a burst of changes is handled by one pass), when something time-based falls due (an
operation's timeout, the grace of a vanished node), and every ``resync_seconds`` as a safety
net -- only while this replica leads and every cache is synced. The Lease is renewed by its own
thread on its own schedule, whatever the passes do.

What a cache may not know yet: an operation can arrive before the Accelerator or policy created
just before it. So at an operation's first sight its targets are read with GET and the policies
listed afresh; everything else reads the caches. What the controller writes goes into its
caches at once (the object the API server returned), so the next pass never acts on the state
from before its own write.

Writes:

* DeviceClasses: server-side apply, field manager ``kubeacc-controller``; orphans deleted
  (owner references make the garbage collector delete them too when a policy goes).
* AcceleratorPolicy/AcceleratorOperation status: server-side apply of the fields this controller
  owns. Operation ``status.results`` belong to the node agents (one field manager per node), so
  the two never fight over a field.
* Accelerators: ``spec.cordoned`` (merge patch) for drains and uncordons; deletion when the
  node is gone.

Cordons, and who lifts them: a ``Drain`` operation's cordon stays until an ``Uncordon``
operation lifts it; a ``drainFirst`` operation lifts its own cordons when it ends, however it
ends; a cordon for an unhealthy device (a policy with ``onUnhealthy: Drain``) is lifted when the
device is healthy again. The annotation ``kubeacc.io/cordoned-by`` records who set it.

"In use" means: a consumer in ``status.allocatedTo`` (written by the node agents) or a reserved
ResourceClaim allocated the device (the moment before the node agent has prepared it).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Collection
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim
from lightkube.types import PatchType

from kubeacc.apiclient import prime_decoders
from kubeacc.controller.leader import LeaderElector
from kubeacc.controller.operations import (
    Refusal,
    TargetView,
    attributable_results,
    busy,
    claim_holders,
    covering,
    validate,
)
from kubeacc.controller.policies import SPEC_HASH_ANNOTATION, device_class
from kubeacc.crds.resources import (
    Accelerator,
    AcceleratorOperation,
    AcceleratorPolicy,
    as_dict,
    is_not_found,
)
from kubeacc.crds.status import (
    apply_operation_status,
    emit_event,
    get_condition,
    now,
    parse_time,
    set_condition,
)
from kubeacc.crds.types import (
    API_VERSION,
    CONTROLLER_ACTIONS,
    POLICY_LABEL,
    AcceleratorOperationSpec,
    AcceleratorOperationStatus,
    AcceleratorPolicySpec,
    AcceleratorPolicyStatus,
    AcceleratorStatus,
    Action,
    Dispatch,
    OperationPhase,
    UnhealthyAction,
)
from kubeacc.crds.watch import WatchCache, ignoring, membership
from kubeacc.metrics.controller import ControllerMetrics
from kubeacc.model import HealthState

log = logging.getLogger(__name__)

FIELD_MANAGER = "kubeacc-controller"
CORDONED_BY = "kubeacc.io/cordoned-by"
#: ``kubeacc.io/cordoned-by`` of a cordon set for an unhealthy device.
POLICY_CORDON = "policy"
DRA_DRIVER = "kubeacc.io"
#: While an operation waits for consumers, it looks again at least this often (seconds): a
#: claim's reservation ending wakes no watch of the controller.
DRAIN_RECHECK_SECONDS = 2.0
_TERMINAL = (OperationPhase.SUCCEEDED, OperationPhase.FAILED)
#: What the controller's threads decode (primed on one thread before they start).
WATCHED_KINDS = (
    AcceleratorOperation,
    AcceleratorPolicy,
    Accelerator,
    Node,
    DeviceClass,
    Lease,
    Event,
    ResourceClaim,
)


class Controller:
    def __init__(
        self,
        client: Client,
        *,
        identity: str,
        lease_namespace: str = "kube-system",
        lease_name: str = "kubeacc-controller",
        interval: float = 0.2,
        resync_seconds: float = 30.0,
        lease_renew_seconds: float = 2.0,
        node_grace_seconds: float = 10.0,
        admin_namespaces: Collection[str] | None = None,
    ) -> None:
        self.client = client
        #: Namespaces whose operations may target any device (default: the Lease's, the
        #: controller's own); others need an AcceleratorPolicy grant.
        self.admin_namespaces = tuple(admin_namespaces or (lease_namespace,))
        self.interval = interval
        self.resync_seconds = resync_seconds
        self.lease_renew_seconds = lease_renew_seconds
        self.elector = LeaderElector(
            client, name=lease_name, namespace=lease_namespace, identity=identity
        )
        self.node_grace_seconds = node_grace_seconds
        self._missing_node_since: dict[str, float] = {}
        self._dirty = threading.Event()
        #: Monotonic time of the earliest time-based look a pass asked for.
        self._due_at = math.inf
        self._renewed_at = -math.inf
        self.passes = 0

        def cache(kind: type[Any], plural: str, **kw: Any) -> WatchCache:
            return WatchCache(
                client, kind, on_change=self._dirty.set, name=f"controller-watch-{plural}", **kw
            )

        self.operations = cache(AcceleratorOperation, "acceleratoroperations", namespaced=True)
        self.policies = cache(AcceleratorPolicy, "acceleratorpolicies")
        # An agent's resync refreshes only lastSeen: no reason for a pass.
        self.accelerators = cache(
            Accelerator, "accelerators", wake_if=ignoring(("status", "lastSeen"))
        )
        # Garbage collection needs to know which Nodes exist; their status changes all the time.
        self.nodes = cache(Node, "nodes", wake_if=membership)
        self.caches = (self.operations, self.policies, self.accelerators, self.nodes)
        self.metrics = ControllerMetrics(self.operations.items, self.leading)
        #: Monotonic time the Lease was last read or written (leader or standby alike).
        self._lease_seen_at = -math.inf
        self._lease_thread: threading.Thread | None = None

    # -- loop --------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        log.info("controller %s starting", self.elector.identity)
        prime_decoders(WATCHED_KINDS)
        for c in self.caches:
            c.start()
        lease = self._lease_thread = threading.Thread(
            target=self._lead, args=(stop,), name="controller-lease", daemon=True
        )
        lease.start()
        try:
            self._loop(stop)
        finally:
            lease.join(10)
            for c in self.caches:
                c.close()
            self.elector.release()

    def _lead(self, stop: threading.Event) -> None:
        """Acquire or renew the Lease every ``lease_renew_seconds``, independent of passes."""
        while not stop.is_set():
            was = self.elector.is_leader
            started = time.monotonic()
            try:
                leading = self.elector.try_acquire_or_renew()
                self._lease_seen_at = time.monotonic()
            except Exception as exc:  # API server away: not leading until a renewal works
                log.warning("leader election: %s", exc)
                self.elector.is_leader = leading = False
            if leading:
                self._renewed_at = started
                if not was:
                    self._dirty.set()  # a new leader looks at everything at once
            stop.wait(self.lease_renew_seconds)

    def leading(self) -> bool:
        """Leader, with a renewal recent enough that no other replica can have taken over."""
        age = time.monotonic() - self._renewed_at
        return self.elector.is_leader and age < self.elector.lease_duration * 2 / 3

    def not_ready(self) -> list[str]:
        """``/readyz``: leader or standby (the Lease answers) and every watch cache synced."""
        reasons = [f"{c.name} not synced" for c in self.caches if not c.synced.is_set()]
        if time.monotonic() - self._lease_seen_at > self.elector.lease_duration:
            reasons.append("leader election: the Lease could not be read or renewed")
        return reasons

    def failing_health(self) -> list[str]:
        """``/healthz``: the Lease thread must be running."""
        if self._lease_thread is not None and not self._lease_thread.is_alive():
            return ["leader-election thread stopped"]
        return []

    def _loop(self, stop: threading.Event) -> None:
        last_pass = -math.inf
        next_resync = 0.0
        while not stop.is_set():
            # Changes that arrive within ``interval`` of the last pass are handled together.
            if stop.wait(max(0.0, last_pass + self.interval - time.monotonic())):
                return
            due = min(next_resync, self._due_at)
            if not self._dirty.is_set() and time.monotonic() < due:
                # Sleep until a change or the next due time (re-checking stop every second).
                self._dirty.wait(min(1.0, max(0.0, due - time.monotonic())))
                continue
            self._dirty.clear()
            if not self.leading() or not all(c.synced.is_set() for c in self.caches):
                next_resync = time.monotonic() + self.resync_seconds
                continue  # becoming leader or a cache syncing marks us dirty again
            last_pass = time.monotonic()
            next_resync = last_pass + self.resync_seconds
            self._due_at = math.inf
            try:
                with self.metrics.pass_seconds.time():
                    self.reconcile_once()
            except Exception:
                log.exception("reconcile pass failed; retrying")
                self.metrics.errors.labels("pass").inc()
                self._due_in(1.0)

    def _due_in(self, seconds: float) -> None:
        """Ask for a pass within ``seconds`` even if nothing changes."""
        self._due_at = min(self._due_at, time.monotonic() + seconds)

    def reconcile_once(self) -> None:
        self.passes += 1
        self.metrics.passes.inc()
        operations = self.operations.items()
        policies = self.policies.items()
        accelerators = self.accelerators.by_name()
        specs = self._specs(policies)
        self.reconcile_policies(policies, specs, accelerators)
        self.reconcile_unhealthy(specs, accelerators)
        self.collect_garbage(accelerators)
        for op in operations:
            try:
                self.reconcile_operation(op, specs, accelerators)
            except Exception:  # one broken object must not stop the others
                log.exception("operation %s", op.get("metadata", {}).get("name", "?"))
                self.metrics.errors.labels("operation").inc()

    @staticmethod
    def _specs(policies: list[dict[str, Any]]) -> dict[str, AcceleratorPolicySpec]:
        return {
            p["metadata"]["name"]: AcceleratorPolicySpec.model_validate(p.get("spec") or {})
            for p in policies
        }

    def _fresh_targets(
        self, spec: AcceleratorOperationSpec
    ) -> tuple[dict[str, dict[str, Any]], dict[str, AcceleratorPolicySpec]]:
        """A new operation's targets (GET) and the policies (LIST), read from the API server:
        the caches may not have seen what was created just before the operation."""
        found: dict[str, dict[str, Any]] = {}
        for name in spec.targets:
            try:
                found[name] = as_dict(self.client.get(Accelerator, name))
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
                continue
            self.accelerators.observe(found[name])
        return found, self._specs([as_dict(p) for p in self.client.list(AcceleratorPolicy)])

    # -- policies ----------------------------------------------------------------------------
    def reconcile_policies(
        self,
        policies: list[dict[str, Any]],
        specs: dict[str, AcceleratorPolicySpec],
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        existing = {
            d.metadata.name: d
            for d in self.client.list(DeviceClass, labels={POLICY_LABEL: None})
            if d.metadata and d.metadata.name
        }
        wanted: set[str] = set()
        for policy in policies:
            name = policy["metadata"]["name"]
            spec = specs[name]
            cls = device_class(policy)
            cname = cls["metadata"]["name"]
            wanted.add(cname)
            have = existing.get(cname)
            have_meta = have.metadata if have else None
            have_hash = (
                (have_meta.annotations or {}).get(SPEC_HASH_ANNOTATION) if have_meta else None
            )
            if have_hash != cls["metadata"]["annotations"][SPEC_HASH_ANNOTATION]:
                self.client.patch(
                    DeviceClass,
                    cname,
                    cls,
                    patch_type=PatchType.APPLY,
                    field_manager=FIELD_MANAGER,
                    force=True,
                )
                emit_event(
                    self.client,
                    policy,
                    "DeviceClassUpdated" if have else "DeviceClassCreated",
                    f"DeviceClass {cname}: {cls['spec']['selectors'][0]['cel']['expression']}",
                )
            matched = sum(
                1
                for a in accelerators.values()
                if (dev := AcceleratorStatus.model_validate(a.get("status") or {}).device)
                and name in covering({name: spec}, dev)
            )
            self._apply_policy_status(policy, cname, matched)
        for cname, obj in existing.items():
            if cname not in wanted:
                owner = (obj.metadata.labels or {}).get(POLICY_LABEL) if obj.metadata else None
                log.info("deleting DeviceClass %s (policy %s is gone or renamed it)", cname, owner)
                try:
                    self.client.delete(DeviceClass, cname)
                except ApiError as exc:
                    if int(exc.status.code or 0) != 404:
                        raise

    def _apply_policy_status(self, policy: dict[str, Any], cname: str, matched: int) -> None:
        old = AcceleratorPolicyStatus.model_validate(policy.get("status") or {})
        gen = policy["metadata"].get("generation")
        new = AcceleratorPolicyStatus(
            device_class_name=cname,
            matched_accelerators=matched,
            observed_generation=gen,
            conditions=set_condition(
                old.conditions, "Ready", True, "DeviceClassReady", f"DeviceClass {cname}", gen
            ),
        )
        if new.to_api() == old.to_api():
            return
        written = self.client.patch(
            AcceleratorPolicy.Status,
            policy["metadata"]["name"],
            {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorPolicy",
                "metadata": {"name": policy["metadata"]["name"]},
                "status": new.to_api(),
            },
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        self.policies.observe(written)

    # -- unhealthy devices -------------------------------------------------------------------
    def reconcile_unhealthy(
        self, specs: dict[str, AcceleratorPolicySpec], accelerators: dict[str, dict[str, Any]]
    ) -> None:
        for name, acc in accelerators.items():
            view = TargetView.parse(acc)
            dev = view.device
            by = (acc["metadata"].get("annotations") or {}).get(CORDONED_BY)
            if (
                dev is not None
                and dev.health.healthy
                and view.spec.cordoned
                and by == POLICY_CORDON
            ):
                self._cordon(acc, POLICY_CORDON, False)
                emit_event(self.client, acc, "Uncordoned", f"{name} is healthy again")
                continue
            if dev is None or dev.health.state is not HealthState.UNHEALTHY:
                continue
            actions = {specs[p].on_unhealthy for p in covering(specs, dev)}
            if UnhealthyAction.DRAIN in actions and not view.spec.cordoned:
                self._cordon(acc, POLICY_CORDON, True)
                emit_event(
                    self.client,
                    acc,
                    "Cordoned",
                    f"{name} is unhealthy ({dev.health.reason or 'no reason given'}); a policy "
                    "asks to drain it: no new allocations",
                    warning=True,
                )

    def _cordon(self, acc: dict[str, Any], by: str, value: bool) -> None:
        name = acc["metadata"]["name"]
        patch: dict[str, Any] = {
            "metadata": {"annotations": {CORDONED_BY: by if value else None}},
            "spec": {"cordoned": value},
        }
        written = self.client.patch(
            Accelerator, name, patch, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER
        )
        self.accelerators.observe(written)
        acc.setdefault("spec", {})["cordoned"] = value

    # -- garbage collection ------------------------------------------------------------------
    def collect_garbage(self, accelerators: dict[str, dict[str, Any]]) -> None:
        """Delete Accelerators of Nodes that have been gone for ``node_grace_seconds``."""
        nodes = set(self.nodes.by_name())
        now_ = time.monotonic()
        missing: dict[str, float] = {}
        for name, acc in accelerators.items():
            node = (acc.get("spec") or {}).get("node")
            if node in nodes:
                continue
            since = missing[name] = self._missing_node_since.get(name, now_)
            if now_ - since < self.node_grace_seconds:
                self._due_in(since + self.node_grace_seconds - now_)
                continue
            log.info("deleting Accelerator %s: node %s is gone", name, node)
            try:
                self.client.delete(Accelerator, name)
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
            self.accelerators.forget(name)
            emit_event(self.client, acc, "NodeGone", f"node {node} no longer exists")
            del missing[name]
        self._missing_node_since = missing

    # -- operations --------------------------------------------------------------------------
    def reconcile_operation(
        self,
        op: dict[str, Any],
        policies: dict[str, AcceleratorPolicySpec],
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        meta = op["metadata"]
        status = AcceleratorOperationStatus.model_validate(op.get("status") or {})
        if status.phase in _TERMINAL:
            return
        before = status.model_copy(deep=True)
        spec = AcceleratorOperationSpec.model_validate(op.get("spec") or {})
        gen = meta.get("generation")
        status.observed_generation = gen
        if status.phase is None:
            accelerators, policies = self._fresh_targets(spec)
        targets = {
            t: (TargetView.parse(accelerators[t]) if t in accelerators else None)
            for t in spec.targets
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
                        f"refusing {spec.action.value}: {detail} (set spec.drainFirst to wait "
                        "for them to finish)",
                    )
            if refusal is not None:
                self._finish(op, status, OperationPhase.FAILED, refusal.reason, refusal.message)
                self._apply_op_status(op, before, status)
                return
            status.phase = OperationPhase.PENDING
            status.message = "validated"
            status.conditions = set_condition(
                status.conditions, "Validated", True, "Validated", "targets and policy checked", gen
            )
            emit_event(self.client, op, "Validated", f"{spec.action.value} on {spec.targets}")
        if status.phase is OperationPhase.PENDING:
            self._pending(op, spec, status, targets)
        elif status.phase is OperationPhase.RUNNING:
            self._running(op, spec, status, accelerators)
        if status.phase not in _TERMINAL:
            left = self._time_left(spec, status)
            draining = get_condition(status.conditions, "Draining")
            if left <= 0 and draining is not None and draining.status.value == "True":
                self._finish(
                    op,
                    status,
                    OperationPhase.FAILED,
                    "DrainTimeout",
                    f"still in use after {spec.timeout_seconds}s: {draining.message}",
                )
            elif left <= 0:
                self._finish(
                    op,
                    status,
                    OperationPhase.FAILED,
                    "Timeout",
                    f"not finished within {spec.timeout_seconds}s",
                )
            else:
                self._due_in(left + 0.05)
        if status.phase in _TERMINAL and spec.drain_first and spec.action is not Action.DRAIN:
            self._lift_cordons(op, spec, accelerators)
        self._apply_op_status(op, before, status)

    def _pending(
        self,
        op: dict[str, Any],
        spec: AcceleratorOperationSpec,
        status: AcceleratorOperationStatus,
        targets: dict[str, TargetView | None],
    ) -> None:
        gen = op["metadata"].get("generation")
        ref = f"{op['metadata']['namespace']}/{op['metadata']['name']}"
        if spec.action is Action.UNCORDON:
            self._uncordon(op, status, targets)
            return
        if spec.drain_first or spec.action is Action.DRAIN:
            for view in targets.values():
                if view is not None and not view.spec.cordoned:
                    self._cordon({"metadata": {"name": view.name}}, ref, True)
        in_use = self._in_use(targets)
        if in_use:
            detail = "; ".join(f"{n} is used by {w}" for n, w in sorted(in_use.items()))
            status.message = f"draining: {detail}"
            status.conditions = set_condition(
                status.conditions, "Draining", True, "WaitingForConsumers", detail, gen
            )
            self._due_in(DRAIN_RECHECK_SECONDS)
            return
        if get_condition(status.conditions, "Draining") is not None:
            status.conditions = set_condition(
                status.conditions, "Draining", False, "Drained", "no consumers left", gen
            )
        if spec.action is Action.DRAIN:
            self._finish(
                op,
                status,
                OperationPhase.SUCCEEDED,
                "Drained",
                "nobody uses the targets; they stay cordoned until an Uncordon operation",
            )
            return
        status.dispatch = [
            Dispatch(accelerator=v.name, node=v.spec.node, device_name=v.spec.device_name)
            for v in targets.values()
            if v is not None
        ]
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
        spec: AcceleratorOperationSpec,
        status: AcceleratorOperationStatus,
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        results = attributable_results(status)
        done = {n: r for n, r in results.items() if r.phase in _TERMINAL}
        wanted = {d.accelerator for d in status.dispatch}
        failed = {n: r for n, r in done.items() if r.phase is OperationPhase.FAILED}
        if not wanted <= set(done):
            status.message = f"{len(done)}/{len(wanted)} targets done"
            return
        if failed:
            first = sorted(failed.items())[0][1]
            msg = "; ".join(f"{n}: {r.message}" for n, r in sorted(failed.items()))
            self._finish(op, status, OperationPhase.FAILED, first.reason or "TargetFailed", msg)
        else:
            self._finish(
                op, status, OperationPhase.SUCCEEDED, "Succeeded", f"{spec.action.value} done"
            )

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
        status: AcceleratorOperationStatus,
        targets: dict[str, TargetView | None],
    ) -> None:
        lifted = []
        for view in targets.values():
            if view is not None and view.spec.cordoned:
                self._cordon({"metadata": {"name": view.name}}, "", False)
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
        self._finish(op, status, OperationPhase.SUCCEEDED, "Uncordoned", message)

    def _lift_cordons(
        self,
        op: dict[str, Any],
        spec: AcceleratorOperationSpec,
        accelerators: dict[str, dict[str, Any]],
    ) -> None:
        """Lift the cordons a drainFirst operation set, once it has ended."""
        ref = f"{op['metadata']['namespace']}/{op['metadata']['name']}"
        for name in spec.targets:
            acc = accelerators.get(name)
            if acc and (acc["metadata"].get("annotations") or {}).get(CORDONED_BY) == ref:
                self._cordon(acc, ref, False)

    def _time_left(
        self, spec: AcceleratorOperationSpec, status: AcceleratorOperationStatus
    ) -> float:
        """Seconds until the operation times out (infinite before it has started)."""
        if not status.start_time:
            return math.inf
        age = dt.datetime.now(dt.UTC) - parse_time(status.start_time)
        return spec.timeout_seconds - age.total_seconds()

    def _finish(
        self,
        op: dict[str, Any],
        status: AcceleratorOperationStatus,
        phase: OperationPhase,
        reason: str,
        message: str,
    ) -> None:
        gen = op["metadata"].get("generation")
        status.phase = phase
        status.message = message
        status.completion_time = now()
        action = str((op.get("spec") or {}).get("action", ""))
        self.metrics.completed.labels(action, phase.value).inc()
        if status.start_time:
            took = dt.datetime.now(dt.UTC) - parse_time(status.start_time)
            self.metrics.duration.labels(action, phase.value).observe(took.total_seconds())
        ok = phase is OperationPhase.SUCCEEDED
        status.conditions = set_condition(
            status.conditions, "Complete" if ok else "Failed", True, reason, message, gen
        )
        emit_event(self.client, op, reason, message, warning=not ok)

    def _apply_op_status(
        self,
        op: dict[str, Any],
        before: AcceleratorOperationStatus,
        status: AcceleratorOperationStatus,
    ) -> None:
        owned = status.to_api()
        owned.pop("results", None)  # the node agents' field
        old = before.to_api()
        old.pop("results", None)
        if owned == old:
            return
        self.operations.observe(apply_operation_status(self.client, op, owned, FIELD_MANAGER))
