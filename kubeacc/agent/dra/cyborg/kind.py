"""Claims on Cyborg's devices: the steps Nova takes for a server, taken for a claim.

For a new claim whose devices are Cyborg slots (:mod:`kubeacc.node.cyborg.inventory`),
:meth:`CyborgKind.finish` records the claim (:mod:`~kubeacc.node.cyborg.records`), then per
device an ARQ of this node's device profile for the slot's deployable, then one Placement
allocation with the claim's UID as the consumer, then one bind of all its ARQs (hostname this
node, instance the claim's UID), and waits for every ARQ to be ``Bound`` (Cyborg's event, or its
state, by :data:`BIND_TIMEOUT_S`). The container's CDI device gets the attach handle: the PCI
address Cyborg bound (``KUBEACC_CYBORG_PCI_ADDRESS``), the ARQ and the handle's type.

Undo (a claim abandoned, unprepared, or found half-made at start): unbind, delete the ARQs,
delete the allocation, forget the record; every step may be repeated. A failure to reach Cyborg
keeps the record and is tried again at each discovery pass; at unprepare it keeps the claim
prepared (:class:`KindError`; the kubelet retries), so that nothing is forgotten half-bound.

The pause points of the crash tests (:mod:`kubeacc.agent.dra.hooks`): ``prepare-after-arq``,
``prepare-after-allocation``, ``prepare-after-bind``, ``unprepare-after-unbind``,
``unprepare-after-arq-delete``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.cyborg.events import BindEvents
from kubeacc.agent.dra.hooks import pause_point
from kubeacc.agent.dra.kind import ClaimError, ClaimWork, DeviceWork, Kind, KindError
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.node import cdi
from kubeacc.node.cyborg.client import CyborgClient, CyborgError, CyborgRefused
from kubeacc.node.cyborg.inventory import CyborgInventory, Slot
from kubeacc.node.cyborg.records import (
    PREPARED,
    RELEASING,
    Arq,
    ClaimRecord,
    Records,
    is_own_profile,
    profile_name,
)

log = logging.getLogger(__name__)

#: Seconds a bind may take before the claim is refused (Cyborg's own bind timeout is 60 s).
BIND_TIMEOUT_S = 60.0
#: Seconds between looks at an ARQ's state while no event came.
POLL_S = 1.0
ENV_PCI = "KUBEACC_CYBORG_PCI_ADDRESS"
ENV_ARQ = "KUBEACC_CYBORG_ARQ"
ENV_HANDLE_TYPE = "KUBEACC_CYBORG_ATTACH_TYPE"
_BOUND = "Bound"
_FAILED = "BindFailed"


@dataclass
class _Note:
    """A claim's Cyborg slots, by the order of its devices."""

    slots: list[tuple[DeviceWork, Slot]] = field(default_factory=list)


def _pci(handle: dict[str, str]) -> str:
    """``dddd:bb:dd.f`` from Cyborg's attach handle (its parts as strings or hex)."""
    try:
        dom, bus = int(handle["domain"], 16), int(handle["bus"], 16)
        dev, fn = int(handle["device"], 16), int(handle["function"], 16)
    except (KeyError, ValueError, TypeError):
        return ""
    return f"{dom:04x}:{bus:02x}:{dev:02x}.{fn:x}"


class CyborgKind(Kind):
    """The DRA driver's kind for Cyborg's devices (module doc)."""

    def __init__(
        self,
        client: CyborgClient,
        inventory: CyborgInventory,
        records: Records,
        events: BindEvents,
        node: str,
        state_dir: Path,
        bind_timeout: float = BIND_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.inventory = inventory
        self.records = records
        self.events = events
        self.node = node
        self.state_dir = state_dir
        self.bind_timeout = bind_timeout
        #: held while an ARQ is made and recorded, and while orphans are looked for
        self._arqs = threading.Lock()
        #: the start's sweep of orphan ARQs is still to do (Cyborg did not answer)
        self._sweep_due = True

    # -- prepare --------------------------------------------------------------------------------
    def prepare(self, dev: DeviceWork) -> None:
        slot = self.inventory.slot(dev.info.name)
        if slot is not None:
            dev.claim.note(_Note).slots.append((dev, slot))

    def finish(self, claim: ClaimWork) -> None:
        note = claim.notes.get(_Note)
        if not isinstance(note, _Note) or not note.slots:
            return
        uid = claim.ref.uid
        if (old := self.records.read(uid)) is not None:
            try:  # a try of this claim that did not end: undone before this one
                self._undo(old)
            except CyborgError as exc:
                raise ClaimError(f"{claim.where}: an earlier try is not undone: {exc}") from None
        rec = ClaimRecord(
            uid=uid,
            namespace=claim.ref.namespace,
            name=claim.ref.name,
            devices={d.info.name: s.rp_uuid for d, s in note.slots},
            classes={s.rp_uuid: s.resource_class for _, s in note.slots},
        )
        try:
            self._bind(claim, rec, note)
        except CyborgError as exc:
            raise ClaimError(f"{claim.where}: Cyborg: {exc}") from None
        by_device = {a.device: a for a in rec.arqs}
        cdi_devices = []
        for c in claim.cdi_devices:
            arq = by_device.get(c.name)
            if arq is None:
                cdi_devices.append(c)
                continue
            handle = rec.handles.get(arq.uuid, {})
            pci = _pci(handle)
            env = {**c.env, ENV_ARQ: arq.uuid, ENV_HANDLE_TYPE: handle.get("type", "")}
            if pci:
                env[ENV_PCI] = pci
            cdi_devices.append(
                cdi.CDIDevice(c.name, pci or c.bus_id, c.device_nodes, env, c.share_id, c.mounts)
            )
        claim.cdi_devices = cdi_devices

    def _bind(self, claim: ClaimWork, rec: ClaimRecord, note: _Note) -> None:
        state_dir = self.state_dir
        self.records.write(rec)  # before anything is asked of Cyborg or Placement
        for rp, rc in rec.classes.items():
            traits = next(s.traits for _, s in note.slots if s.rp_uuid == rp)
            group = {f"resources:{rc}": "1", **{f"trait:{t}": "required" for t in traits}}
            self.client.ensure_profile(profile_name(self.node, rp), group)
        for dev, slot in note.slots:
            with self._arqs:
                uuid = self.client.create_arq(profile_name(self.node, slot.rp_uuid))
                rec.arqs.append(Arq(uuid, slot.rp_uuid, dev.info.name))
                self.records.write(rec)
        pause_point("prepare-after-arq", state_dir)
        wanted: dict[str, dict[str, int]] = {}
        for _, slot in note.slots:
            per = wanted.setdefault(slot.rp_uuid, {})
            per[slot.resource_class] = per.get(slot.resource_class, 0) + 1
        self.client.allocate(rec.uid, wanted)
        pause_point("prepare-after-allocation", state_dir)
        self.client.bind([(a.uuid, a.rp) for a in rec.arqs], self.node, rec.uid)
        pause_point("prepare-after-bind", state_dir)
        rec.handles = self._wait_bound(claim, [a.uuid for a in rec.arqs])
        rec.phase = PREPARED
        self.records.write(rec)

    def _wait_bound(self, claim: ClaimWork, arqs: list[str]) -> dict[str, dict[str, str]]:
        """Each ARQ's attach handle once all are Bound; ClaimError when one failed or the
        deadline passed."""
        deadline = time.monotonic() + self.bind_timeout
        pending = set(arqs)
        handles: dict[str, dict[str, str]] = {}
        try:
            while pending:
                self.events.wait(pending, min(POLL_S, max(deadline - time.monotonic(), 0)))
                for uuid in sorted(pending):
                    got = self.client.arq(uuid)
                    state = str((got or {}).get("state", ""))
                    if got is None or state == _FAILED or self.events.status(uuid) == "failed":
                        raise ClaimError(
                            f"{claim.where}: Cyborg could not bind ARQ {uuid} to {self.node} "
                            f"(state {state or 'gone'})"
                        )
                    if state == _BOUND:
                        info = got.get("attach_handle_info") or {}
                        handle = {str(k): str(v) for k, v in dict(info).items()}
                        handle["type"] = str(got.get("attach_handle_type") or "")
                        handles[uuid] = handle
                        pending.discard(uuid)
                if pending and time.monotonic() >= deadline:
                    raise ClaimError(
                        f"{claim.where}: Cyborg did not bind ARQs {sorted(pending)} within "
                        f"{self.bind_timeout:g} s"
                    )
        finally:
            self.events.forget(set(arqs))
        return handles

    # -- undo -----------------------------------------------------------------------------------
    def _undo(self, rec: ClaimRecord, *, unprepare: bool = False) -> None:
        """Unbind, delete the ARQs and the allocation, forget the record; CyborgError leaves
        the record (every step is safe to repeat)."""
        if rec.phase != RELEASING:
            rec.phase = RELEASING
            self.records.write(rec)
        bound = []
        for a in rec.arqs:
            got = self.client.arq(a.uuid)
            if got is not None and got.get("instance_uuid"):
                bound.append(a.uuid)
        if bound:
            try:
                self.client.unbind(bound)
            except CyborgRefused as exc:  # mid-bind: the delete below still frees it
                log.warning("unbind of %s refused: %s", bound, exc)
        if unprepare:
            pause_point("unprepare-after-unbind", self.state_dir)
        self.client.delete_arqs([a.uuid for a in rec.arqs])
        if unprepare:
            pause_point("unprepare-after-arq-delete", self.state_dir)
        self.client.release(rec.uid)
        self.records.remove(rec.uid)

    def abandon(self, uids: Sequence[str]) -> None:
        for uid in uids:
            rec = self.records.read(uid)
            if rec is None:
                continue
            try:
                self._undo(rec)
            except CyborgError as exc:
                log.warning("claim %s: Cyborg's ARQs not undone yet (retried): %s", uid, exc)

    def unprepare(self, uids: Sequence[str]) -> None:
        for uid in uids:
            rec = self.records.read(uid)
            if rec is None:
                continue
            try:
                self._undo(rec, unprepare=True)
            except CyborgError as exc:
                raise KindError(f"Cyborg: {exc}") from None

    def touches(self, uids: set[str]) -> bool:
        return any(self.records.read(uid) is not None for uid in uids)

    def again(self, ref: ClaimRef, done: PreparedClaim) -> str:
        rec = self.records.read(ref.uid)
        if rec is not None and rec.phase != PREPARED:
            return f"Cyborg's binding of claim {ref.uid} is being undone"
        return ""

    # -- start and retries ----------------------------------------------------------------------
    def recover(self, prepared: set[str]) -> None:
        """Undo every record the checkpoint does not hold as prepared, then delete this node's
        ARQs that no record names (made just before a crash); what Cyborg does not answer now
        is tried again by :meth:`retry`."""
        for rec in self.records.all():
            if rec.uid in prepared and rec.phase == PREPARED:
                continue
            try:
                self._undo(rec)
                log.info("claim %s: undid Cyborg ARQs left by an earlier run", rec.uid)
            except CyborgError as exc:
                log.warning("claim %s: Cyborg's ARQs not undone yet (retried): %s", rec.uid, exc)
        self._sweep()

    def _sweep(self) -> None:
        with self._arqs:
            try:
                arqs = self.client.arqs()
            except CyborgError as exc:
                log.warning("Cyborg's ARQs not checked for orphans yet (retried): %s", exc)
                return
            known = {a.uuid for rec in self.records.all() for a in rec.arqs}
            orphans = [
                str(a["uuid"])
                for a in arqs
                if is_own_profile(str(a.get("device_profile_name", "")), self.node)
                and a["uuid"] not in known
            ]
            try:
                if orphans:
                    bound = [
                        str(a["uuid"])
                        for a in arqs
                        if a["uuid"] in orphans and a.get("instance_uuid")
                    ]
                    if bound:
                        self.client.unbind(bound)
                    self.client.delete_arqs(orphans)
                    log.info("deleted Cyborg ARQs no claim holds: %s", orphans)
            except CyborgError as exc:
                log.warning("orphan ARQs %s not deleted yet (retried): %s", orphans, exc)
                return
            self._sweep_due = False

    def retry(self) -> None:
        """What an earlier undo or sweep left for Cyborg to answer (each discovery pass): the
        records being released (a claim being prepared is never touched here)."""
        for rec in self.records.all():
            if rec.phase == RELEASING:
                try:
                    self._undo(rec)
                except CyborgError:
                    continue
        if self._sweep_due:
            self._sweep()
