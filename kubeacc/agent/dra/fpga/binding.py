"""FPGAs programmed before the pod is bound: binding conditions (KEP-5007).

Loading a bitstream takes seconds and can be refused (not in the library, a wrong digest, no
AcceleratorPolicy allows it, built for another FPGA interface). Done in NodePrepareResources it
happens after the pod was bound, and a refusal strands the pod on its node. So each FPGA is
published with the binding condition :data:`PROGRAMMED` and the binding failure condition
:data:`FAILED`: kube-scheduler allocates the device, reserves the claim and then waits in
PreBind, the pod still unbound, until the claim's ``status.devices`` entry of that device has
``PROGRAMMED`` True, or gives the allocation back and schedules the pod again (maybe elsewhere)
when ``FAILED`` is True or its binding timeout (10 minutes by default) passes.

:class:`FpgaBinder` is the node's half: it is fed every claim allocated from this node's pool
(the claim watch), finds the devices whose conditions are not set yet (:func:`pending`), loads
the bitstream of the claim's ``FpgaConfig`` with the checks of
:class:`kubeacc.agent.fpga_claims.ClaimProgrammer` (a claim without one needs nothing loaded) and
writes the outcome as the device's condition. NodePrepareResources then only checks that the
card carries the bitstream.

Safety: only results of driver kubeacc.io and this node's pool are looked at; the condition is
written only while the claim (same UID) still holds that allocation, by a JSON patch guarded by
its resource version, and the admission policy lets a node agent write only its own pool's
entries. A crash between loading and writing is harmless: the
claim is still pending when the agent starts again, and loading a bitstream the card already
carries is a no-op. A load that hangs is given up after ``timeout`` seconds and reported as
:data:`FAILED` (reason ``ProgrammingTimedOut``), well before the scheduler's own timeout.

Each outcome written is also an Event on the claim (Normal when programmed or nothing to load,
Warning with the refusal's reason otherwise; ``kubectl describe resourceclaim`` shows it) and a
count in ``kubeacc_agent_fpga_bindings_total{outcome,reason}``.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lightkube import Client
from prometheus_client import Counter

from kubeacc.agent.dra.claimpatch import patch_devices
from kubeacc.agent.dra.claims import WatchingClaimSource
from kubeacc.agent.dra.fpga.conditions import FAILED, PROGRAMMED
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.events import emit_event
from kubeacc.crds.opaque import ConfigError, FpgaConfig, parse_config

log = logging.getLogger(__name__)

#: Seconds one load may take before it is reported failed.
PROGRAM_TIMEOUT_S = 120.0
#: Writes of one outcome tried (2 s apart) before it is given up (the scheduler's timeout
#: then gives the device back).
WRITE_ATTEMPTS = 30

#: (device, bitstream name, "sha256:<hex>") -> what was done; raises with the reason.
Program = Callable[[str, str, str], str]


def with_binding_conditions(
    devices: Sequence[dict[str, Any]], names: set[str]
) -> list[dict[str, Any]]:
    """Slice entries with the binding conditions on the devices named in ``names``."""
    return [
        {**d, "bindingConditions": [PROGRAMMED], "bindingFailureConditions": [FAILED]}
        if d.get("name") in names
        else d
        for d in devices
    ]


@dataclass(frozen=True)
class Work:
    """One allocated device whose binding condition this node's agent still owes."""

    namespace: str
    name: str
    uid: str
    device: str
    pool: str
    #: When the scheduler allocated it (one allocation is worked on once).
    allocated_at: str
    #: (bitstream name, digest) the claim asks for; None: nothing to load.
    bitstream: tuple[str, str] | None = None
    #: Why the claim's config cannot be followed ("" when it can).
    problem: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.uid, self.device, self.allocated_at)


def _conditions(claim: dict[str, Any], pool: str, device: str) -> dict[str, str]:
    for entry in (claim.get("status") or {}).get("devices") or []:
        if (entry.get("driver"), entry.get("pool"), entry.get("device")) == (
            DRIVER_NAME,
            pool,
            device,
        ):
            return {c.get("type", ""): c.get("status", "") for c in entry.get("conditions") or []}
    return {}


def _bitstream(configs: list[dict[str, Any]], request: str) -> tuple[tuple[str, str] | None, str]:
    """The bitstream the configs of ``request`` name (the claim's own over its class's)."""
    ours = [c for c in configs if (c.get("opaque") or {}).get("driver") == DRIVER_NAME]
    ours.sort(key=lambda c: 0 if c.get("source") == "FromClass" else 1)
    found: tuple[str, str] | None = None
    for c in ours:
        requests = c.get("requests") or []
        if requests and request not in requests and request.split("/", 1)[0] not in requests:
            continue
        try:
            cfg = parse_config(c["opaque"].get("parameters"))
        except ConfigError as exc:
            return None, str(exc)
        if isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
            found = (cfg.bitstream.name, cfg.bitstream.digest)
    return found, ""


def pending(claim: dict[str, Any], pool: str) -> list[Work]:
    """The devices of ``claim`` from ``pool`` that wait for this agent's binding condition."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    alloc = status.get("allocation") or {}
    devices = alloc.get("devices") or {}
    out = []
    for r in devices.get("results") or []:
        if r.get("driver") != DRIVER_NAME or r.get("pool") != pool:
            continue
        if PROGRAMMED not in (r.get("bindingConditions") or []):
            continue
        conds = _conditions(claim, pool, r["device"])
        if conds.get(PROGRAMMED) == "True" or conds.get(FAILED) == "True":
            continue
        bitstream, problem = _bitstream(devices.get("config") or [], r.get("request", ""))
        out.append(
            Work(
                namespace=meta.get("namespace", ""),
                name=meta.get("name", ""),
                uid=meta.get("uid", ""),
                device=r["device"],
                pool=pool,
                allocated_at=str(alloc.get("allocationTimestamp") or ""),
                bitstream=bitstream,
                problem=problem,
            )
        )
    return out


def condition_entry(work: Work, ok: bool, reason: str, message: str) -> dict[str, Any]:
    """The ``status.devices`` entry that reports the outcome for ``work``'s device."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "driver": DRIVER_NAME,
        "pool": work.pool,
        "device": work.device,
        "conditions": [
            {
                "type": PROGRAMMED if ok else FAILED,
                "status": "True",
                "reason": reason,
                "message": message[:1000],
                "lastTransitionTime": now,
            }
        ],
    }


def _reason(message: str) -> str:
    """The reason leading a refusal's message (``BitstreamNotAllowed: ...``)."""
    head = message.split(":", 1)[0].strip()
    if head.isidentifier() and head[:1].isupper():
        return head
    return "ProgrammingFailed"


class FpgaBinder:
    """Loads the bitstreams of claims allocated here and reports them as binding conditions."""

    def __init__(
        self,
        client: Client,
        node: str,
        program: Program,
        *,
        timeout: float = PROGRAM_TIMEOUT_S,
        claims: WatchingClaimSource | None = None,
        counter: Counter | None = None,
    ) -> None:
        self.client = client
        #: The agent's watch of its claims: a write starts from its copy (no GET first).
        self.claims = claims
        self.node = node
        self.program = program
        self.timeout = timeout
        #: ``kubeacc_agent_fpga_bindings_total`` (labels outcome, reason); None: not counted.
        self.counter = counter
        self.field_manager = f"{DRIVER_NAME}-{node}-binding"
        self._queue: queue.Queue[Work | None] = queue.Queue()
        self._queued: set[tuple[str, str, str]] = set()
        #: Allocations whose outcome was written (the watch may still show them pending).
        self._done: set[tuple[str, str, str]] = set()
        self._attempts: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: Outcomes written, for tests and logs: (namespace/name, device, condition, reason).
        self.outcomes: list[tuple[str, str, str, str]] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fpga-binding", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(5)

    def observe(self, claim: dict[str, Any]) -> None:
        """A claim allocated from this node's pool was seen (added, changed, listed)."""
        for work in pending(claim, self.node):
            with self._lock:
                if work.key in self._queued or work.key in self._done:
                    continue
                self._queued.add(work.key)
            self._queue.put(work)

    def _run(self) -> None:
        while (work := self._queue.get()) is not None:
            try:
                self.handle(work)
            except Exception:  # one claim's trouble never stops the others
                log.exception("binding condition of %s/%s", work.namespace, work.name)
            finally:
                with self._lock:
                    self._queued.discard(work.key)

    def handle(self, work: Work) -> None:
        """Load ``work``'s bitstream (if any) and write the outcome."""
        ok, reason, message = self._load(work)
        where = f"{work.namespace}/{work.name}"
        try:
            self.write(work, condition_entry(work, ok, reason, message))
        except Exception as exc:  # API server away: the claim stays pending; try again
            log.warning("binding condition of %s, %s not written: %s", where, work.device, exc)
            with self._lock:
                tries = self._attempts[work.key] = self._attempts.get(work.key, 0) + 1
            if tries < WRITE_ATTEMPTS:
                timer = threading.Timer(2.0, self._requeue, args=(work,))
                timer.daemon = True
                timer.start()
            return
        with self._lock:
            self._done.add(work.key)
            self._attempts.pop(work.key, None)
        self.outcomes.append((where, work.device, PROGRAMMED if ok else FAILED, reason))
        if self.counter is not None:
            self.counter.labels("programmed" if ok else "failed", reason).inc()
        self.record(work, ok, reason, message)

    def record(self, work: Work, ok: bool, reason: str, message: str) -> None:
        """The outcome as an Event on the claim, reported as this node's agent (the admission
        policy's rule for Events); a failure to record it is logged."""
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": work.namespace, "name": work.name, "uid": work.uid},
        }
        emit_event(
            self.client,
            claim,
            reason,
            f"device {work.device} on node {self.node}: {message}",
            warning=not ok,
            component=f"kubeacc-agent-{self.node}",
        )

    def _requeue(self, work: Work) -> None:
        with self._lock:
            if work.key in self._queued or work.key in self._done:
                return
            self._queued.add(work.key)
        self._queue.put(work)

    def _load(self, work: Work) -> tuple[bool, str, str]:
        if work.problem:
            return False, "InvalidConfig", work.problem
        if work.bitstream is None:
            return True, "NoBitstream", "the claim asks for no bitstream"
        name, digest = work.bitstream
        outcome: list[tuple[bool, str, str]] = []

        def load() -> None:
            try:
                done = self.program(work.device, name, digest)
                outcome.append((True, "Programmed", done))
            except Exception as exc:  # ProgrammingRefused carries the reason first
                outcome.append((False, _reason(str(exc)), str(exc)))

        runner = threading.Thread(target=load, name=f"program-{work.device}", daemon=True)
        runner.start()
        runner.join(self.timeout)
        if not outcome:
            return (
                False,
                "ProgrammingTimedOut",
                f"loading {name} on {work.device} took longer than {self.timeout:.0f} s",
            )
        return outcome[0]

    def write(self, work: Work, entry: dict[str, Any]) -> None:
        """Put the entry's condition into the claim's entry of the device, if the claim still
        holds that allocation (:mod:`kubeacc.agent.dra.claimpatch`: a guarded JSON patch)."""

        def change(data: dict[str, Any]) -> list[dict[str, Any]] | None:
            if not still_allocated(data, work):
                log.info("claim %s/%s was given back meanwhile", work.namespace, work.name)
                return None
            return merged_entries((data.get("status") or {}).get("devices") or [], entry)

        first = self.claims.cached(work.namespace, work.name, work.uid) if self.claims else None
        patch_devices(self.client, work.namespace, work.name, change, self.field_manager, first)


def still_allocated(claim: dict[str, Any], work: Work) -> bool:
    """Does ``claim`` (API JSON) still hold the allocation ``work`` is about?"""
    if (claim.get("metadata") or {}).get("uid") != work.uid:
        return False
    alloc = (claim.get("status") or {}).get("allocation") or {}
    if str(alloc.get("allocationTimestamp") or "") != work.allocated_at:
        return False
    results = (alloc.get("devices") or {}).get("results") or []
    return any(
        (r.get("driver"), r.get("pool"), r.get("device")) == (DRIVER_NAME, work.pool, work.device)
        for r in results
    )


def merged_entries(
    entries: Sequence[dict[str, Any]], entry: dict[str, Any]
) -> list[dict[str, Any]]:
    """``status.devices`` with ``entry``'s conditions put into its device's entry (replacing
    conditions of the same type; other drivers' and devices' entries as they were)."""
    key = (entry["driver"], entry["pool"], entry["device"])
    out: list[dict[str, Any]] = []
    found = False
    for e in entries:
        if (e.get("driver"), e.get("pool"), e.get("device")) != key:
            out.append(e)
            continue
        found = True
        new_types = {c["type"] for c in entry["conditions"]}
        kept = [c for c in e.get("conditions") or [] if c.get("type") not in new_types]
        out.append({**e, "conditions": [*kept, *entry["conditions"]]})
    if not found:
        out.append(entry)
    return out
