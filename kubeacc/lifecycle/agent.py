"""The life-cycle agent of one node.

It does two things:

1. discovers the node's devices through the host root (every ``interval`` seconds: local and
   cheap) and server-side-applies one ``Accelerator`` per device (``<node>-<device>``): spec
   (node, device name) and the status fields this agent owns (``device``, ``hostDriver``,
   ``lastSeen``, conditions ``Present`` and ``Healthy``) -- only when they changed, when the
   server's copy of them no longer is what the agent wrote (someone edited or deleted it), and
   for ``lastSeen`` every ``resync_seconds``. The node's Accelerators come from a watch (label
   ``kubeacc.io/node``), so an idle node sends nothing between those refreshes. Devices that
   disappear keep their object with ``Present=False``; the controller deletes a node's objects
   when the Node goes.
2. runs the operation targets the controller dispatched to this node (``status.dispatch``
   entries naming it) and reports each in ``status.results`` under its own field manager,
   ``kubeacc-agent-<node>``: Running first, then Succeeded or Failed. Operations come from a
   watch-fed cache (:class:`kubeacc.crds.watch.WatchCache`); a change to any operation wakes
   the agent at once. A broken watch lists afresh when it comes back, so no timed re-list is
   needed.

A ``Running`` result of this node found at start-up means the agent died during that action; it
is reported Failed (``AgentRestarted``) rather than replayed, because a half-done hardware action
must be looked at, not repeated blindly. For the same reason a target this agent has started is
never started again by the same process, even if a cache still shows the operation as it was
before the agent's own report. What an action came to is kept until its report is written: a
report the API server did not take (an outage, a timeout) is written again at the next pass,
so an action that ran is never left Running. A read the action needs first that fails
(:class:`NotStarted`) leaves the target Running for the next pass: nothing was done yet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from kubeacc.apiclient import prime_decoders
from kubeacc.crds.api import (
    API_VERSION,
    MODEL_LABEL,
    NODE_LABEL,
    TYPE_LABEL,
    ConditionStatus,
    OperationPhase,
)
from kubeacc.crds.apiread import (
    accelerator_device,
    accelerator_status,
    operation_spec,
    operation_status,
    results_to_api,
)
from kubeacc.crds.apistatus import apply_operation_status, now, with_condition
from kubeacc.crds.events import emit_event
from kubeacc.crds.policyread import allowed_bitstream_digests
from kubeacc.crds.resources import (
    Accelerator,
    AcceleratorOperation,
    AcceleratorPolicy,
    as_dict,
    is_not_found,
)
from kubeacc.crds.schemastructs import SchemaViolation, to_api
from kubeacc.crds.views import OperationSpecView
from kubeacc.crds.watch import WatchCache
from kubeacc.discovery import discover
from kubeacc.host import Host
from kubeacc.host.files import HostReadError
from kubeacc.metrics.lifecycle import LifecycleMetrics
from kubeacc.model import Device, HealthState, ModelError
from kubeacc.node.nodelabels import accelerator_labels
from kubeacc.node.operations.bitstreams import BitstreamLibrary
from kubeacc.node.operations.executor import VFIO, Executor
from kubeacc.node.operations.outcome import Outcome

if TYPE_CHECKING:
    from kubeacc.lifecycle.cyborgops import CyborgOperations

log = logging.getLogger(__name__)

_AGENT_CONDITIONS = ("Present", "Healthy")
#: How often an unchanged device's status is written again (its ``lastSeen``). Every write is
#: one request per device: at 10 minutes an idle 16-device node sends 0.027 requests/s.
RESYNC_SECONDS = 600.0
#: What the agent's threads decode (primed on one thread before the watch starts).
WATCHED_KINDS = (AcceleratorOperation, Accelerator, AcceleratorPolicy, Event)


class NotStarted(Exception):
    """A read the action needs first failed (API server away, slow or refusing for now):
    nothing was done to the device, so the target stays Running and the next pass tries it."""


class LifecycleAgent:
    def __init__(
        self,
        client: Client,
        *,
        node_name: str,
        host: Host,
        bitstream_dir: Path,
        interval: float = 1.0,
        resync_seconds: float = RESYNC_SECONDS,
        nvml: str = "auto",
        cyborg: CyborgOperations | None = None,
    ) -> None:
        self.client = client
        #: The node's devices are Cyborg's, and so are its operations (kubeacc.lifecycle.cyborgops).
        self.cyborg = cyborg
        self.nvml = nvml
        self.metrics = LifecycleMetrics()
        self.node = node_name
        self.host = host
        self.interval = interval
        self.resync_seconds = resync_seconds
        self.field_manager = f"kubeacc-agent-{node_name}"
        self.executor = Executor(host, BitstreamLibrary(bitstream_dir), self._rediscover)
        #: Accelerator name -> (status last applied, when, the agent's fields in the answer).
        self._applied: dict[str, tuple[dict[str, Any], float, _Owned]] = {}
        self._started = False
        self._discovered = False
        #: Why the last discovery pass failed ("" when it did not).
        self.discovery_error = ""
        #: (operation uid, accelerator) this process has started: never started twice.
        self._handled: set[tuple[str, str]] = set()
        #: (operation uid, accelerator) -> what its action came to, until the report is written.
        self._unreported: dict[tuple[str, str], Outcome] = {}
        self._wake = threading.Event()
        self.operations = WatchCache(
            client,
            AcceleratorOperation,
            namespaced=True,
            on_change=self._wake.set,
            name=f"accop-watch-{node_name}",
        )
        #: The node's Accelerators, as the server has them and as this agent last wrote them.
        self.accelerators = WatchCache(
            client,
            Accelerator,
            labels={NODE_LABEL: node_name},
            name=f"accelerator-watch-{node_name}",
        )

    def accelerator_name(self, device_name: str) -> str:
        return f"{self.node}-{device_name}"

    # -- loop --------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        log.info("life-cycle agent for node %s on %s", self.node, self.host.root)
        prime_decoders(WATCHED_KINDS)
        self.operations.start()
        self.accelerators.start()
        next_discovery = 0.0
        try:
            while not stop.is_set():
                inventory = time.monotonic() >= next_discovery
                if inventory:
                    next_discovery = time.monotonic() + self.interval
                try:
                    self.pass_once(inventory=inventory)
                except Exception:
                    log.exception("agent pass failed; retrying")
                    self.metrics.pass_errors.inc()
                # Woken early by a change to an operation; discovery keeps its interval.
                self._wake.wait(max(0.0, next_discovery - time.monotonic()))
        finally:
            self.operations.close()
            self.accelerators.close()

    def wake(self) -> None:
        self._wake.set()

    def not_ready(self) -> list[str]:
        """``/readyz``: both watches are synced and a first pass has run."""
        reasons = []
        if not self.operations.synced.is_set():
            reasons.append("operations watch not synced")
        if not self.accelerators.synced.is_set():
            reasons.append("Accelerators watch not synced")
        if not self._started:
            reasons.append("no pass over the operations yet")
        if self.discovery_error:
            reasons.append(f"Accelerators as of the last good inventory: {self.discovery_error}")
        return reasons

    def pass_once(self, *, inventory: bool = True) -> None:
        """One pass: the inventory (when asked), then the operations. Discovery is local and
        runs whatever the API server does; what it found is applied, and operations are run,
        only while the watch of each is synced (one that is (re)starting leaves things as they
        are)."""
        self._wake.clear()
        if inventory:
            try:
                devices = self._discover()
                self.discovery_error = ""
            except HostReadError as err:  # the Accelerators stay as they are
                if not self.discovery_error:
                    log.warning("%s; the node's Accelerators stay as they are", err)
                self.discovery_error = str(err)
                self.metrics.pass_errors.inc()
            else:
                if not self._discovered:
                    self._discovered = True
                    log.info("first discovery: %d devices on node %s", len(devices), self.node)
                if self.accelerators.synced.is_set():
                    self.sync_inventory(devices)
        if not self.operations.synced.is_set():
            return
        self.process_operations(self.operations.items())
        self._started = True

    # -- inventory ---------------------------------------------------------------------------
    def _discover(self) -> dict[str, Device]:
        if self.cyborg is not None:
            return self.cyborg.discover()
        # strict: a pass the machine failed raises, so no Accelerator is marked absent for it
        return {d.name: d for d in discover(self.host, nvml=self.nvml, strict=True).devices}

    def _rediscover(self, device_name: str) -> Device | None:
        return self._discover().get(device_name)

    def sync_inventory(self, devices: dict[str, Device] | None = None) -> dict[str, Device]:
        """Apply what discovery shows (``devices``, or a discovery now) to the node's
        Accelerators as the watch has them."""
        if devices is None:
            devices = self._discover()
        known = self.accelerators.by_name()
        for dev in devices.values():
            name = self.accelerator_name(dev.name)
            self._apply_accelerator(name, dev.name, dev, known.get(name), present=True)
        for name, obj in list(known.items()):
            dev_name = obj["spec"]["deviceName"]
            if dev_name not in devices:
                self._apply_accelerator(name, dev_name, accelerator_device(obj), obj, present=False)
        return devices

    def _apply_accelerator(
        self,
        name: str,
        device_name: str,
        dev: Device | None,
        current: dict[str, Any] | None,
        *,
        present: bool,
    ) -> None:
        old = accelerator_status(current)
        host_driver = old.host_driver
        driver = dev.pci.driver if dev and dev.pci else None
        if driver and driver != VFIO:
            host_driver = driver
        conds = [to_api(c) for c in old.conditions if c.type in _AGENT_CONDITIONS]
        conds = with_condition(
            conds,
            "Present",
            present,
            "Discovered" if present else "NotFound",
            "" if present else "the device is no longer seen on the node",
        )
        if dev is not None:
            healthy = dev.health.state is HealthState.HEALTHY
            conds = with_condition(
                conds,
                "Healthy",
                healthy if dev.health.state is not HealthState.UNKNOWN else ConditionStatus.UNKNOWN,
                dev.health.state.value,
                dev.health.reason,
            )
        status: dict[str, Any] = {"conditions": conds}
        if dev is not None:
            status["device"] = dev.to_json_dict()
        if host_driver:
            status["hostDriver"] = host_driver
        last, when, owned = self._applied.get(name, ({}, 0.0, None))
        if (
            current is not None
            and last == status
            and _owned(current) == owned  # nobody changed what this agent wrote
            and time.monotonic() - when < self.resync_seconds
        ):
            return
        have = ((current or {}).get("metadata") or {}).get("labels") or {}
        labels = accelerator_labels(self.node, dev)
        if dev is None:  # gone from the node: keep the type and model it had
            labels.update({k: have[k] for k in (TYPE_LABEL, MODEL_LABEL) if k in have})
        body = {
            "apiVersion": API_VERSION,
            "kind": "Accelerator",
            "metadata": {"name": name, "labels": {**labels, NODE_LABEL: self.node}},
            "spec": {"node": self.node, "deviceName": device_name},
        }
        # the status subresource ignores metadata: labels are written with the object itself
        # (created, or labelled by an older agent without the type and model labels)
        if current is None or any(have.get(k) != v for k, v in labels.items()):
            self.client.patch(
                Accelerator,
                name,
                body,
                patch_type=PatchType.APPLY,
                field_manager=self.field_manager,
                force=True,
            )
        try:
            applied = self.client.patch(
                Accelerator.Status,
                name,
                {**body, "status": {**status, "lastSeen": now()}},
                patch_type=PatchType.APPLY,
                field_manager=self.field_manager,
                force=True,
            )
        except ApiError as exc:
            if is_not_found(exc):
                self.accelerators.forget(name)  # deleted meanwhile: created again next pass
            raise
        answer = as_dict(applied)
        self.accelerators.observe(answer)
        self._applied[name] = (status, time.monotonic(), _owned(answer))

    # -- operations --------------------------------------------------------------------------
    def process_operations(self, operations: Iterable[Any]) -> None:
        live: set[str] = set()
        for item in operations:
            op = as_dict(item)
            live.add(op.get("metadata", {}).get("uid") or "")
            try:
                self._process(op)
            except Exception:  # one broken object must not stop the others
                log.exception("operation %s", op.get("metadata", {}).get("name"))
        # Forget the targets of operations that are gone (keeps the set small).
        self._handled = {k for k in self._handled if k[0] in live}
        self._unreported = {k: v for k, v in self._unreported.items() if k[0] in live}

    def _process(self, op: dict[str, Any]) -> None:
        status = operation_status(op)
        if status.phase != OperationPhase.RUNNING:
            return
        mine = [d for d in status.dispatch if d.node == self.node]
        if not mine:
            return
        results = {r.accelerator: to_api(r) for r in status.results if r.node == self.node}
        uid = op["metadata"].get("uid") or ""
        try:
            spec: OperationSpecView | Outcome = operation_spec(op)
        except SchemaViolation as exc:  # an old CRD let it in: refused, never half-read
            spec = Outcome(False, "InvalidSpec", str(exc))
        for target in mine:
            key = (uid, target.accelerator)
            if (unreported := self._unreported.get(key)) is not None:
                self._finish(op, results, target.accelerator, unreported)
                continue
            if key in self._handled:
                continue  # reported by this process already; the cache may lag behind
            phase = (results.get(target.accelerator) or {}).get("phase")
            if phase in (OperationPhase.SUCCEEDED, OperationPhase.FAILED):
                continue
            if phase == OperationPhase.RUNNING and not self._started:
                outcome = Outcome(
                    False,
                    "AgentRestarted",
                    "the node agent restarted while this action ran; check the device "
                    "and create a new operation",
                )
            elif isinstance(spec, Outcome):
                outcome = spec
            else:
                self._report(op, results, target.accelerator, None)
                self._handled.add((uid, target.accelerator))
                action = str(spec.action)
                try:
                    with self.metrics.action_seconds.labels(action).time():
                        outcome = self._execute(op, spec, target.accelerator, target.device_name)
                except NotStarted as exc:  # nothing done to the device: the next pass tries
                    self._handled.discard(key)
                    log.warning(
                        "%s: %s on %s not started, again at the next pass: %s",
                        op["metadata"].get("name"),
                        action,
                        target.device_name,
                        exc,
                    )
                    continue
                result = OperationPhase.SUCCEEDED if outcome.ok else OperationPhase.FAILED
                self.metrics.actions.labels(action, result.value).inc()
            self._unreported[key] = outcome  # written again at the next pass if this fails
            self._handled.add(key)
            self._finish(op, results, target.accelerator, outcome)

    def _finish(
        self, op: dict[str, Any], results: dict[str, dict[str, Any]], acc: str, outcome: Outcome
    ) -> None:
        """Report how the target ``acc`` ended, then its Event and the inventory."""
        self._report(op, results, acc, outcome)
        self._unreported.pop(((op["metadata"].get("uid") or ""), acc), None)
        emit_event(
            self.client,
            op,
            outcome.reason,
            f"{acc}: {outcome.message}",
            warning=not outcome.ok,
            component=self.field_manager,
        )
        self.sync_inventory()

    def _execute(
        self, op: dict[str, Any], spec: OperationSpecView, acc_name: str, device_name: str
    ) -> Outcome:
        try:
            acc = as_dict(self.client.get(Accelerator, acc_name))
        except ApiError as exc:
            if exc.status.code != 404:
                raise NotStarted(f"reading Accelerator {acc_name}: {exc}") from exc
            return Outcome(False, "AcceleratorNotFound", f"{acc_name}: {exc}")
        except httpx2.HTTPError as exc:
            raise NotStarted(f"reading Accelerator {acc_name}: {exc}") from exc
        try:
            acc_status = accelerator_status(acc)
        except SchemaViolation as exc:
            return Outcome(False, "InvalidObject", str(exc))
        if acc_status.allocated_to:  # taken since the controller checked: never under a user
            users = ", ".join(
                f"{c.kind} {c.namespace + '/' if c.namespace else ''}{c.name}"
                for c in acc_status.allocated_to
            )
            return Outcome(
                False,
                "DeviceInUse",
                f"{acc_name} is used by {users}; drain it first (spec.drainFirst)",
            )
        try:  # an object the schema would refuse fails the target, with what is wrong in it
            device = self._rediscover(device_name) or accelerator_device(acc)
            if device is None:
                return Outcome(False, "DeviceNotFound", f"{device_name} is not on node {self.node}")
            allowed = allowed_bitstream_digests(
                (as_dict(p) for p in self.client.list(AcceleratorPolicy)), device
            )
        except (ApiError, httpx2.HTTPError) as exc:
            raise NotStarted(f"reading the AcceleratorPolicies: {exc}") from exc
        except (SchemaViolation, ModelError) as exc:
            return Outcome(False, "InvalidObject", str(exc))
        except HostReadError as exc:  # the device not read now: nothing was done to it
            return Outcome(False, "DiscoveryFailed", str(exc))
        log.info("%s: %s on %s", op["metadata"]["name"], spec.action, device_name)
        try:
            if self.cyborg is not None:
                return self.cyborg.run(spec, device, allowed_digests=allowed)
            return self.executor.run(
                spec, device, host_driver=acc_status.host_driver, allowed_digests=allowed
            )
        except Exception as exc:  # a bug must fail the target, not the agent
            log.exception("executing %s", spec.action)
            return Outcome(False, "InternalError", f"{type(exc).__name__}: {exc}")

    def _report(
        self,
        op: dict[str, Any],
        results: dict[str, dict[str, Any]],
        acc_name: str,
        outcome: Outcome | None,
    ) -> None:
        """Write this node's result for ``acc_name``: Running (no ``outcome`` yet) or how it
        ended; ``results`` are this node's results as API dicts, updated in place."""
        res: dict[str, Any] = {"accelerator": acc_name, "node": self.node}
        if outcome is None:
            res.update(phase=OperationPhase.RUNNING.value, reason="Running")
        else:
            phase = OperationPhase.SUCCEEDED if outcome.ok else OperationPhase.FAILED
            res.update(
                phase=phase.value,
                reason=outcome.reason,
                message=outcome.message[:4096],
                afuId=outcome.afu_id,
                driver=outcome.driver,
                finishedAt=now(),
            )
        results[acc_name] = res
        written = apply_operation_status(
            self.client, op, {"results": results_to_api(results.values())}, self.field_manager
        )
        self.operations.observe(written)


#: What of an Accelerator this agent writes, as the server returned it.
_Owned = tuple[Any, ...]


def _owned(obj: dict[str, Any]) -> _Owned:
    """The fields of ``obj`` this agent owns, but ``lastSeen``: spec, the node, type and model
    labels, and ``status.device``, ``hostDriver`` and the Present and Healthy conditions. Taken
    from the server's answer to the agent's write and from the watch's copy alike, so whatever
    the API server prunes or defaults is the same on both sides."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    status = obj.get("status") or {}
    return (
        obj.get("spec"),
        tuple(labels.get(k) for k in (NODE_LABEL, TYPE_LABEL, MODEL_LABEL)),
        status.get("device"),
        status.get("hostDriver"),
        [c for c in status.get("conditions") or [] if c.get("type") in _AGENT_CONDITIONS],
    )
