"""The controller: a level-triggered reconcile loop under Lease leader election.

Every pass looks at the whole picture (policies, Accelerators, operations, Nodes, the
DeviceClasses it generated) and moves each object one step toward what it should be. A pass that
is interrupted (crash, lost leadership) leaves nothing that the next pass cannot finish: every
write is idempotent.

Passes are driven by watches, not by a timer: operations, policies, Accelerators, Nodes and the
DeviceClasses of policies are held in watch-fed caches (:class:`kubeacc.crds.watch.WatchCache`),
and any change marks the controller dirty. A pass runs when something changed (at most one
every ``interval`` seconds, so a burst of changes is handled by one pass), when something
time-based falls due (an operation's timeout, the grace of a vanished node), and every
``resync_seconds`` as a safety net -- only while this replica leads and every cache is synced.
The Lease is renewed by its own thread on its own schedule, whatever the passes do.

What a cache may not know yet: an operation can arrive before the Accelerator or policy created
just before it. So at an operation's first sight its targets are read with GET and the policies
listed afresh; everything else reads the caches. What the controller writes goes into its
caches at once (the object the API server returned), so the next pass never acts on the state
from before its own write. Of Accelerators and Nodes the caches keep only the fields a pass
reads (:mod:`kubeacc.controller.kept`); no write is built from a cached object.

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

This module is the reconcile loop; each pass calls policy -> class
(:mod:`kubeacc.controller.policyclasses`), the cordons of unhealthy devices
(:mod:`kubeacc.controller.cordons`) and operation dispatch (:mod:`kubeacc.controller.dispatch`),
which write the status fields the controller owns (:mod:`kubeacc.controller.status`), and the
remediation of faulty devices (:mod:`kubeacc.controller.remediator`), whose operations the same
dispatch then runs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Collection
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

from kubeacc.apiclient import prime_decoders
from kubeacc.controller import kept, taintrules
from kubeacc.controller.cordons import CORDONED_BY, Cordons
from kubeacc.controller.dispatch import DRA_DRIVER, OperationDispatch
from kubeacc.controller.drainfollow import DrainFollower
from kubeacc.controller.policyclasses import policy_specs, reconcile_policies
from kubeacc.controller.remediator import Remediator
from kubeacc.controller.views import ParsedAccelerators
from kubeacc.crds.api import POLICY_LABEL
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import (
    Accelerator,
    AcceleratorOperation,
    AcceleratorPolicy,
    is_not_found,
)
from kubeacc.crds.watch import WatchCache, ignoring, membership
from kubeacc.leader import LeaderElector
from kubeacc.metrics.controller import ControllerMetrics

__all__ = ["CORDONED_BY", "Controller"]

log = logging.getLogger(__name__)

#: Objects per page of the Accelerator and Node LISTs (as client-go's reflectors).
PAGE = 500

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
    ResourceSlice,
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
        remediation_namespace: str | None = None,
    ) -> None:
        self.client = client
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
        # Only the fields a pass reads are kept (kept.py), listed a page at a time. An agent's
        # resync refreshes only lastSeen, which is not kept: no reason for a pass.
        self.accelerators = cache(
            Accelerator, "accelerators", wake_if=ignoring(), keep=kept.accelerator, page=PAGE
        )
        # Garbage collection needs to know which Nodes exist; their status changes all the time.
        self.nodes = cache(Node, "nodes", wake_if=membership, keep=kept.node, page=PAGE)
        # The classes of policies: a pass compares them with the policies (was a LIST a pass).
        self.classes = cache(DeviceClass, "deviceclasses", labels={POLICY_LABEL: None})
        self.caches = (
            self.operations,
            self.policies,
            self.accelerators,
            self.nodes,
            self.classes,
        )
        self.metrics = ControllerMetrics(
            self.operations.items, self.leading, self.accelerators.items
        )
        self.cordons = Cordons(client, self.accelerators)
        self.parsed = ParsedAccelerators()
        self.dispatch = OperationDispatch(
            client,
            operations=self.operations,
            accelerators=self.accelerators,
            metrics=self.metrics,
            cordons=self.cordons,
            due_in=self._due_in,
            admin_namespaces=tuple(admin_namespaces or (lease_namespace,)),
        )
        self.remediation = Remediator(
            client,
            accelerators=self.accelerators,
            operations=self.operations,
            namespace=remediation_namespace or lease_namespace,
            due_in=self._due_in,
        )
        # kubeacc.io's slices' device names, watched only while a drain is in force: a pass
        # when they change.
        self.drains = DrainFollower(
            client,
            slices=lambda: cache(
                ResourceSlice,
                "resourceslices",
                fields={"spec.driver": DRA_DRIVER},
                wake_if=taintrules.device_names_changed,
                keep=taintrules.slice_names,  # device names only: not the whole slices
            ),
            operations=self.operations,
            metrics=self.metrics,
        )
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
            self.drains.close()
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
            if not self.leading():
                self.drains.close()  # a standby follows no drains
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
        specs = policy_specs(policies)
        facts = self.parsed.facts(accelerators, specs)
        covered = [f.covering for f in facts.values()]
        reconcile_policies(self.client, self.policies, self.classes, policies, covered)
        self.cordons.reconcile_unhealthy(specs, accelerators, facts)
        self.remediation.reconcile(specs, accelerators)
        self.collect_garbage(accelerators)
        for op in operations:
            try:
                self.dispatch.reconcile(op, specs, accelerators)
            except Exception:  # one broken object must not stop the others
                log.exception("operation %s", op.get("metadata", {}).get("name", "?"))
                self.metrics.errors.labels("operation").inc()
        try:
            self.drains.reconcile(accelerators)
        except Exception:  # API server away: the next pass tries again
            log.exception("drain rules of new partitions and VFs")
            self.metrics.errors.labels("drain-rules").inc()

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
