"""The remediation loop: device faults the node agents report, handled under the policies'
``remediation`` sections (the decisions: :mod:`kubeacc.controller.remediation`).

Level-triggered like the rest of the controller, and everything it needs to know is in the
cluster, so a restarted or new leader carries on where the last one stopped:

* a fault is ``status.lastFault`` of an Accelerator (written by its node agent); its ``time``
  names it, and the annotation ``kubeacc.io/remediation-fault`` records the last one handled;
* what remediation has started (the rate limits' windows) is its AcceleratorOperations
  (label ``kubeacc.io/remediation``, their creation time and target);
* a device out for remediation is cordoned by ``remediation`` with the annotation
  ``kubeacc.io/remediation-operation`` naming its operation; one left for a person (``Taint``,
  ``HandToAdmin``, a limit or the back-off holding the drain back, a failed operation) is
  cordoned by ``remediation-hold`` and stays so until an ``Uncordon`` operation;
* when a device was last put back is the annotation ``kubeacc.io/remediation-returned``.

The steps of one device: fault -> cordoned and a ``Reset`` (or ``Power: Cycle``) operation
with ``drainFirst`` created (it waits until the holders have gone) -> the operation succeeds ->
once the device reports healthy its cordon is lifted and it is back in service. Each step is
the condition ``Remediation`` of the Accelerator and an Event on it, and the steps that concern
them are Events on the device's holders (their Pods and ResourceClaims), where the owner of the
workload sees them (``kubectl get events``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.types import PatchType

from kubeacc.contracts.names import DOMAIN
from kubeacc.controller.cordons import CORDONED_BY
from kubeacc.controller.elapsed import Elapsed
from kubeacc.controller.operations import TargetView, covering
from kubeacc.controller.remediation import (
    OPERATION_PREFIX,
    Decision,
    Fault,
    Ledger,
    decide,
    operation_for,
)
from kubeacc.controller.status import FIELD_MANAGER
from kubeacc.crds.api import (
    API_VERSION,
    REMEDIATION_CONDITION,
    EventClass,
    OperationPhase,
    RemediationAction,
)
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, is_not_found
from kubeacc.crds.schemastructs import to_api
from kubeacc.crds.status import get_condition, parse_time, set_condition
from kubeacc.crds.views import ConsumerView, FaultView
from kubeacc.crds.watch import WatchCache

log = logging.getLogger(__name__)

FAULT_ANNOTATION = f"{DOMAIN}/remediation-fault"
OPERATION_ANNOTATION = f"{DOMAIN}/remediation-operation"
RETURNED_ANNOTATION = f"{DOMAIN}/remediation-returned"
REMEDIATION_LABEL = f"{DOMAIN}/remediation"
#: ``kubeacc.io/cordoned-by`` of a device out for remediation, and of one left for a person.
OUT = "remediation"
HOLD = "remediation-hold"
CONDITION = REMEDIATION_CONDITION
#: Seconds between looks at a device waiting for its operation or its health.
RECHECK_SECONDS = 1.0

_API_VERSIONS = {"Pod": "v1", "ResourceClaim": "resource.k8s.io/v1"}


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _annotations(acc: dict[str, Any]) -> dict[str, str]:
    return dict((acc.get("metadata") or {}).get("annotations") or {})


def ledger_of(
    operations: Iterable[dict[str, Any]],
    accelerators: dict[str, dict[str, Any]],
    now: float,
    age: Callable[[Hashable, dt.datetime], float],
) -> Ledger:
    """What remediation did, from its operations and the Accelerators' annotations; each time
    as ``now`` less its age by ``age`` (:class:`~kubeacc.controller.elapsed.Elapsed`), so that
    the rate windows and the back-off hold across steps of the wall clock (NTP, a resumed VM):
    an hour's step forward would otherwise empty every window at once."""
    ledger = Ledger()
    for op in operations:
        meta = op.get("metadata") or {}
        if (meta.get("labels") or {}).get(REMEDIATION_LABEL) != "true":
            continue
        created = meta.get("creationTimestamp")
        at = now
        if created:
            key = ("op", meta.get("namespace"), meta.get("name"), created)
            at = now - age(key, parse_time(created))
        for target in (op.get("spec") or {}).get("targets") or []:
            node = ((accelerators.get(target) or {}).get("spec") or {}).get("node", "")
            ledger.started.append((at, target, node))
    for name, acc in accelerators.items():
        notes = _annotations(acc)
        if (acc.get("spec") or {}).get("cordoned") and notes.get(CORDONED_BY) == OUT:
            ledger.out.add(name)
        if RETURNED_ANNOTATION in notes:
            stamp = notes[RETURNED_ANNOTATION]
            try:
                ledger.returned[name] = now - age(("returned", name, stamp), parse_time(stamp))
            except ValueError:
                log.warning("%s: unreadable %s", name, RETURNED_ANNOTATION)
    return ledger


class Remediator:
    """Runs the remediation of every Accelerator (module docstring) in each controller pass."""

    def __init__(
        self,
        client: Client,
        *,
        accelerators: WatchCache,
        operations: WatchCache,
        namespace: str,
        due_in: Callable[[float], None],
        clock: Callable[[], float] | None = None,
        mono: Callable[[], float] | None = None,
    ) -> None:
        self.client = client
        self.accelerators = accelerators
        self.operations = operations
        self.namespace = namespace
        self.due_in = due_in
        self.clock = clock or time.time
        #: The ages of operations and returns: a step of the wall clock once they were seen
        #: moves no rate window or back-off (kubeacc/controller/elapsed.py).
        self.ages = Elapsed(
            wall=lambda: dt.datetime.fromtimestamp(self.clock(), dt.UTC),
            mono=mono or time.monotonic,
        )

    # -- the state, from the cluster --------------------------------------------------------
    def ledger(self, accelerators: dict[str, dict[str, Any]]) -> Ledger:
        return ledger_of(self.operations.items(), accelerators, self.clock(), self.ages.age)

    # -- the pass ---------------------------------------------------------------------------
    def reconcile(self, specs: dict[str, Any], accelerators: dict[str, dict[str, Any]]) -> None:
        ledger = self.ledger(accelerators)
        for name in sorted(accelerators):
            acc = accelerators[name]
            try:
                if _annotations(acc).get(CORDONED_BY) == OUT:
                    self._follow(acc, ledger)
                else:
                    self._lifted(acc)
                self._new_fault(acc, specs, ledger)
            except Exception:  # one device's trouble must not stop the others
                log.exception("remediation of %s", name)

    def _section(self, specs: dict[str, Any], view: TargetView) -> tuple[str, Any] | None:
        """The first covering policy with a ``remediation`` section, and the section."""
        if view.device is None:
            return None
        for policy in covering(specs, view.device):
            section = specs[policy].remediation
            if section is not None:
                return policy, section
        return None

    def _new_fault(
        self,
        acc: dict[str, Any],
        specs: dict[str, Any],
        ledger: Ledger,
    ) -> None:
        status = acc.get("status") or {}
        if not status.get("lastFault"):
            return  # most devices: no fault, nothing to parse (a pass sees every device)
        view = TargetView.parse(acc)
        report = view.status.last_fault
        if report is None or _annotations(acc).get(FAULT_ANNOTATION) == report.time:
            return
        found = self._section(specs, view)
        notes: dict[str, str | None] = {FAULT_ANNOTATION: report.time}
        if found is None or _annotations(acc).get(CORDONED_BY) == HOLD:
            # no policy acts on it, or the device is left for a person already
            self._annotate(acc, notes)
            return
        policy, section = found
        event = EventClass(report.event)
        fault = Fault(view.name, view.spec.node, event, report.xid, report.failures or 1)
        now = self.clock()
        decision = decide(section, fault, ledger, now)
        if decision is None:
            self._annotate(acc, notes)  # no rule covers it, or the device is out already
            return
        if decision.action in (
            RemediationAction.DRAIN_AND_RESET,
            RemediationAction.DRAIN_AND_POWER_CYCLE,
        ):
            self._take_out(acc, view, policy, decision, report, notes)
            ledger.take_out(fault, now)
        else:
            self._hold(acc, view, policy, decision, notes)

    # -- steps ------------------------------------------------------------------------------
    def _take_out(
        self,
        acc: dict[str, Any],
        view: TargetView,
        policy: str,
        decision: Decision,
        report: FaultView,
        notes: dict[str, str | None],
    ) -> None:
        suffix = report.time.replace(":", "").replace("-", "").replace(".", "").lower()[:22]
        body = operation_for(decision, view.name, self.namespace, suffix)
        assert body is not None
        ref = f"{self.namespace}/{body['metadata']['name']}"
        # The operation first: its name comes from the fault, so a pass that stops before the
        # fault is recorded finds it again (409) instead of making a second. The device is
        # cordoned (by remediation) before the dispatch first sees the operation (next pass),
        # so drainFirst finds it cordoned and leaves the cordon to us: the device stays out
        # until it is healthy again.
        created = self._create(body)
        self.operations.observe(created)
        self._annotate(acc, {**notes, OPERATION_ANNOTATION: ref}, cordon=OUT)
        what = f"{decision.reason} (policy {policy}); operation {ref}"
        self._step(acc, view, True, "Draining", what, holders=True)
        self.due_in(RECHECK_SECONDS)

    def _hold(
        self,
        acc: dict[str, Any],
        view: TargetView,
        policy: str,
        decision: Decision,
        notes: dict[str, str | None],
    ) -> None:
        # a device someone else cordoned keeps their cordon (and its lifting)
        self._annotate(acc, notes, cordon=None if view.spec.cordoned else HOLD)
        reason = {
            RemediationAction.TAINT: "HeldBack" if decision.held else "Tainted",
            RemediationAction.HAND_TO_ADMIN: "HandedToAdmin",
        }[decision.action]
        message = (
            f"{decision.reason} (policy {policy}); no new allocations until an Uncordon operation"
        )
        self._step(acc, view, True, reason, message, holders=True)

    def _follow(self, acc: dict[str, Any], ledger: Ledger) -> None:
        """A device out for remediation: its operation's progress, then its return."""
        view = TargetView.parse(acc)
        ref = _annotations(acc).get(OPERATION_ANNOTATION, "")
        ns, _, name = ref.partition("/")
        op = self.operations.get(name, ns) if name else None
        if op is None:
            self._give_up(acc, view, f"its operation {ref or '(none)'} is gone")
            return
        status = op.get("status") or {}
        phase = status.get("phase")
        if phase == OperationPhase.FAILED:
            self._give_up(
                acc, view, f"operation {ref} failed: {status.get('message') or 'no message'}"
            )
            return
        if phase != OperationPhase.SUCCEEDED:
            draining = any(
                c.get("type") == "Draining" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            if draining:
                self._step(acc, view, True, "Draining", f"operation {ref}: {status.get('message')}")
            elif phase == OperationPhase.RUNNING:
                self._step(acc, view, True, "Resetting", f"operation {ref}: handed to the node")
            self.due_in(RECHECK_SECONDS)
            return
        dev = view.device
        if dev is None or not dev.health.healthy:
            why = dev.health.reason if dev is not None else "no device reported"
            self._step(acc, view, True, "WaitingForHealthy", f"operation {ref} done; health: {why}")
            self.due_in(RECHECK_SECONDS)
            return
        now = self.clock()
        self._annotate(
            acc, {OPERATION_ANNOTATION: None, RETURNED_ANNOTATION: _stamp(now)}, cordon=""
        )
        ledger.put_back(view.name, now)
        self._step(
            acc,
            view,
            False,
            "Returned",
            f"operation {ref} done and the device is healthy: back in service",
        )

    def _lifted(self, acc: dict[str, Any]) -> None:
        """A device remediation left out whose cordon a person lifted (Uncordon): back."""
        conditions = (acc.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == CONDITION for c in conditions):
            return  # never remediated: nothing to parse
        view = TargetView.parse(acc)
        cond = get_condition(view.status.conditions, CONDITION)
        if cond is not None and cond.status == "True" and not view.spec.cordoned:
            self._step(acc, view, False, "Uncordoned", "cordon lifted: back in service")

    def _give_up(self, acc: dict[str, Any], view: TargetView, why: str) -> None:
        self._annotate(acc, {OPERATION_ANNOTATION: None}, cordon=HOLD)
        self._step(
            acc, view, True, "RemediationFailed", f"{why}; left cordoned for a person", warn=True
        )

    # -- writes -----------------------------------------------------------------------------
    def _create(self, body: dict[str, Any]) -> Any:
        meta = body["metadata"]
        try:
            return self.client.create(
                AcceleratorOperation(
                    apiVersion=API_VERSION,
                    kind="AcceleratorOperation",
                    metadata=ObjectMeta(
                        name=meta["name"],
                        namespace=meta["namespace"],
                        labels=meta["labels"],
                        annotations=meta["annotations"],
                    ),
                    spec=body["spec"],
                ),
                namespace=meta["namespace"],
            )
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            # created by an earlier pass that stopped before it was recorded
            return self.client.get(AcceleratorOperation, meta["name"], namespace=self.namespace)

    def _annotate(
        self, acc: dict[str, Any], notes: dict[str, str | None], *, cordon: str | None = None
    ) -> None:
        """One merge patch of the annotations and, unless ``cordon`` is None, the cordon: set
        by ``cordon``, or lifted when it is empty."""
        patch: dict[str, Any] = {"metadata": {"annotations": notes}}
        if cordon is not None:
            notes = {**notes, CORDONED_BY: cordon or None}
            patch = {"metadata": {"annotations": notes}, "spec": {"cordoned": bool(cordon)}}
            acc.setdefault("spec", {})["cordoned"] = bool(cordon)
        written = self.client.patch(
            Accelerator,
            acc["metadata"]["name"],
            patch,
            patch_type=PatchType.MERGE,
            field_manager=FIELD_MANAGER,
        )
        self.accelerators.observe(written)
        current = acc["metadata"].setdefault("annotations", {})
        for k, v in notes.items():
            if v is None:
                current.pop(k, None)
            else:
                current[k] = v

    def _step(
        self,
        acc: dict[str, Any],
        view: TargetView,
        out: bool,
        reason: str,
        message: str,
        *,
        holders: bool = False,
        warn: bool = False,
    ) -> None:
        """Condition ``Remediation`` and an Event, when the step changed."""
        old = get_condition(view.status.conditions, CONDITION)
        if old is not None and old.reason == reason and old.status == str(out):
            return
        conditions = set_condition([c for c in [old] if c], CONDITION, out, reason, message)
        try:
            written = self.client.patch(
                Accelerator.Status,
                view.name,
                {
                    "apiVersion": API_VERSION,
                    "kind": "Accelerator",
                    "metadata": {"name": view.name},
                    "status": {"conditions": to_api(conditions)},
                },
                patch_type=PatchType.APPLY,
                field_manager=FIELD_MANAGER,
                force=True,
            )
            self.accelerators.observe(written)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
        acc.setdefault("status", {})["conditions"] = to_api(
            [c for c in view.status.conditions if c.type != CONDITION] + conditions
        )
        emit_event(self.client, acc, f"Remediation{reason}", message, warning=out or warn)
        if holders:
            for c in view.consumers:
                self._tell(c, view.name, reason, message)

    def _tell(self, consumer: ConsumerView, device: str, reason: str, message: str) -> None:
        api = _API_VERSIONS.get(consumer.kind)
        if api is None or not consumer.namespace:
            return
        obj = {
            "apiVersion": api,
            "kind": consumer.kind,
            "metadata": {
                "name": consumer.name,
                "namespace": consumer.namespace,
                **({"uid": consumer.uid} if consumer.uid else {}),
            },
        }
        emit_event(
            self.client,
            obj,
            f"DeviceRemediation{reason}",
            f"device {device} that this {consumer.kind} holds: {message}",
            warning=True,
        )


__all__ = ["OPERATION_PREFIX", "Remediator"]
