"""Prepare and unprepare claims: the node-side half of DRA, independent of gRPC.

``prepare`` checks every claim reference first (:mod:`kubeacc.agent.dra.refs`), then reads and
checks each new claim (it exists, has the UID the kubelet named, is allocated, its
``kubeacc.io`` devices come from this node's pool and are published here, its opaque config is
valid), writes the claim's CDI spec and then the checkpoint, and only then answers. Each claim
gets its own answer or error.

What a kind of device needs beyond that (a MIG instance, a bitstream, a GPU sharing strategy, a
share's limits, the NVIDIA driver's user space) is a :class:`~kubeacc.agent.dra.kind.DeviceKind`
the driver calls at fixed steps (:mod:`kubeacc.agent.dra.kind`): :mod:`.mig.kind`,
:mod:`.fpga.kind`, :mod:`.sharing.kind` and :mod:`.whole.kind`, then any given with ``kinds``.
The driver keeps the order of the steps, the locks, the CDI specs, the device metadata, the
checkpoint and the pause points.

Locks: reading claims from the API server (and a kind's prepare: programming an FPGA, making a
MIG instance) happens outside the driver lock, under a per-claim guard, so one slow or hung API
server never blocks an unprepare or the prepare of a claim already prepared. Each API read has a
deadline (``api_budget`` for one call, well under the kubelet's 45 s). Files (CDI specs,
checkpoint) change only under the driver lock, and so do the kinds' commits.

Prepare of new claims: for each, the kinds prepare each device, then finish the claim; then,
under the lock, each claim is committed by the kinds and its metadata and CDI spec written;
then one checkpoint record holds them all. A claim that fails after its kinds prepared is
abandoned by them (in reverse order): a MIG instance made is destroyed, a GPU setting applied
given back.

Unprepare needs no API server and is all or nothing per call: the specs are renamed aside, the
kinds undo the claims' devices (MIG instances, GPU sharing settings), the checkpoint entry is
removed, then the specs deleted; when a kind or the checkpoint write fails the specs go back, so
a failure leaves the claims prepared and the kubelet retries.
On start, :meth:`Driver.reconcile` lets the kinds make again what a reboot took, makes the CDI
directory agree with the checkpoint, then lets the kinds make the devices agree with it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec import structs

from kubeacc.agent.dra import metadata, unused
from kubeacc.agent.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice, StateError
from kubeacc.agent.dra.claims import ClaimSource
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.devicestatus import (
    DeviceStatusWriter,
    NetworkReader,
    device_entries,
    entry_key,
)
from kubeacc.agent.dra.enforcement import claim_enforcement
from kubeacc.agent.dra.fpga.kind import FpgaKind, FpgaProgrammer
from kubeacc.agent.dra.guard import ClaimGuard
from kubeacc.agent.dra.hooks import pause_point
from kubeacc.agent.dra.kind import ClaimError, ClaimWork, DeviceKind, DeviceWork, KindError
from kubeacc.agent.dra.mig.kind import MigKind
from kubeacc.agent.dra.mig.prepare import MigPartitions
from kubeacc.agent.dra.refs import ClaimRef, ref_error
from kubeacc.agent.dra.sharing.applied import AppliedSharing
from kubeacc.agent.dra.sharing.kind import SharingKind
from kubeacc.agent.dra.whole.kind import WholeDevices
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.opaque import (
    ConfigError,
    applies_to,
    config_env,
    config_json,
    config_kind,
    parse_config,
)
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.node import cdi
from kubeacc.node.atomic import write_atomic
from kubeacc.node.sharelimit import Enforcement, Limiter
from kubeacc.node.userspace.provider import DriverUserSpace

log = logging.getLogger(__name__)

#: Time one prepare call may spend reading claims (the kubelet gives the call 45 s).
API_BUDGET_S = 20.0

__all__ = ["ClaimError", "ClaimRef", "Driver", "FpgaProgrammer", "PrepareResult"]


@dataclass
class PrepareResult:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class Driver:
    """The DRA driver's core. ``fpga``/``fpga_verify``, ``sharing``, ``partitions``,
    ``limiter`` and ``user_space`` configure the built-in kinds; ``kinds`` are called after
    them (:mod:`kubeacc.agent.dra.kind`)."""

    def __init__(
        self,
        node: str,
        claims: ClaimSource,
        devices: Callable[[], Mapping[str, DeviceInfo]],
        *,
        cdi_dir: Path,
        state_dir: Path,
        device_root: Path = Path("/"),
        fpga: FpgaProgrammer | None = None,
        fpga_verify: FpgaProgrammer | None = None,
        compact_after: int = 1000,
        api_budget: float = API_BUDGET_S,
        on_change: Callable[[], None] | None = None,
        metrics: AgentMetrics | None = None,
        sharing: AppliedSharing | None = None,
        partitions: MigPartitions | None = None,
        limiter: Limiter | None = None,
        user_space: DriverUserSpace | None = None,
        kinds: Sequence[DeviceKind] = (),
    ) -> None:
        self.node = node
        self.metrics = metrics or AgentMetrics()
        self._mig = MigKind(partitions, devices, state_dir, device_root)
        self._fpga = FpgaKind(fpga, fpga_verify)
        self._sharing = SharingKind(sharing, limiter or Limiter())
        self._whole = WholeDevices(user_space)
        #: The device kinds, in the order they are called (abandon: the reverse).
        self.kinds: list[DeviceKind] = [self._mig, self._fpga, self._sharing, self._whole]
        self.kinds += kinds
        #: Called (outside the lock) after claims were prepared or unprepared.
        self.on_change = on_change
        #: Writes claims' status.devices after prepare and unprepare (None: not written).
        self.status: DeviceStatusWriter | None = None
        #: Claims whose devices a reboot took and :meth:`reconcile` made again: their status
        #: is written again once the writer starts (:meth:`start_status`).
        self._remade: set[str] = set()
        #: Device metadata files for the containers (KEP-5304), written at prepare; the agent
        #: turns it on (``--no-device-metadata`` keeps it off).
        self.device_metadata = False
        #: Reads a prepared interface's network data for its status (None: the name only).
        self.network: NetworkReader | None = None
        self.claims = claims
        self.devices = devices
        self.cdi_dir = cdi_dir
        self.state_dir = state_dir
        #: Where the device nodes are on the host (the CDI specs' ``hostPath``).
        self.device_root = device_root
        self.api_budget = api_budget
        self.lock = threading.Lock()
        self.guard = ClaimGuard()
        try:
            cdi_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"CDI directory {cdi_dir}: {exc.strerror or exc}") from None
        self.checkpoint = Checkpoint(state_dir, compact_after)
        self.checkpoint.load()
        self._count()

    # -- the built-in kinds' settings, as attributes ------------------------------------------
    @property
    def fpga(self) -> FpgaProgrammer | None:
        """Loads a claim's bitstream (None: no bitstream library)."""
        return self._fpga.program

    @fpga.setter
    def fpga(self, value: FpgaProgrammer | None) -> None:
        self._fpga.program = value

    @property
    def fpga_verify(self) -> FpgaProgrammer | None:
        """Checks a bitstream loaded before binding (kubeacc.agent.dra.fpga.binding)."""
        return self._fpga.verify

    @fpga_verify.setter
    def fpga_verify(self, value: FpgaProgrammer | None) -> None:
        self._fpga.verify = value

    @property
    def sharing(self) -> AppliedSharing | None:
        """Applies GpuConfig sharing strategies on the GPUs (None: such configs are refused)."""
        return self._sharing.sharing

    @sharing.setter
    def sharing(self, value: AppliedSharing | None) -> None:
        self._sharing.sharing = value

    @property
    def partitions(self) -> MigPartitions | None:
        """Creates and destroys MIG instances of partition devices (None: no MIG here)."""
        return self._mig.partitions

    @property
    def limiter(self) -> Limiter:
        """Enforces memory shares in their containers (kubeacc.node.sharelimit)."""
        return self._sharing.limiter

    @property
    def user_space(self) -> DriverUserSpace | None:
        """The NVIDIA driver's user space for NVIDIA GPU claims (None: not injected)."""
        return self._whole.user_space

    def _count(self) -> None:
        """The prepared claims and shares, by what enforces each share (metrics)."""
        # a copy: prepares and unprepares of other kubelet calls change the claims meanwhile
        claims = list(self.checkpoint.claims.items())
        self.metrics.prepared_claims.set(len(claims))
        tally = dict.fromkeys((e.value for e in Enforcement), 0)
        for uid, claim in claims:
            for how in claim_enforcement(uid, claim).values():
                tally[how] = tally.get(how, 0) + 1
        for how, n in tally.items():
            self.metrics.shares.labels(how).set(n)

    def _described(self, uid: str) -> dict[str, str]:
        """Device -> the UUID claim ``uid``'s containers see, where not the published one."""
        out: dict[str, str] = {}
        for kind in self.kinds:
            out.update(kind.describe(uid))
        return out

    # -- start-up ---------------------------------------------------------------------------
    def reconcile(self) -> tuple[list[str], list[str]]:
        """Remove CDI specs of claims not in the checkpoint; rewrite missing ones.

        Returns (removed, rewritten) claim UIDs; StateError if the CDI directory is not usable.
        """
        self._restore()
        try:
            with self.lock:
                removed, rewritten = self._reconcile()
        except OSError as exc:
            raise StateError(
                f"CDI directory {self.cdi_dir} is not writable: {exc.strerror or exc}"
            ) from None
        if removed or rewritten:
            log.info("reconciled CDI specs: removed %s, rewrote %s", removed, rewritten)
        with self.lock:
            if restored := self._restore_metadata():
                log.info("device metadata made again for claims %s", restored)
            claims = dict(self.checkpoint.claims)
        for uid, done in claims.items():  # a reboot may have cleared the cards; best effort
            self._again(ClaimRef(done.namespace, done.name, uid), done)
        with self.lock:
            for kind in self.kinds:
                kind.recover(set(self.checkpoint.claims))
        return removed, rewritten

    def _restore(self) -> None:
        """The kinds make again what a node reboot or a device reset took (MIG instances),
        their claims' specs, checkpoint and metadata naming what was made; before the specs
        are written and the socket served."""
        for kind in self.kinds:
            changed = kind.restore(dict(self.checkpoint.claims))
            if not changed:
                continue
            with self.lock:
                try:
                    self.checkpoint.record_prepare(changed)
                except OSError as exc:  # the old specs stay; the next start tries again
                    log.error("devices made again, checkpoint not updated: %s", exc)
                    continue
                for uid in changed:
                    metadata.remove(self.state_dir, uid)  # made again with the new UUIDs
                self._remade.update(changed)

    def _reconcile(self) -> tuple[list[str], list[str]]:
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        for leftover in [*cdi.leftovers(self.cdi_dir), *self.state_dir.glob(".*.tmp")]:
            leftover.unlink(missing_ok=True)  # interrupted writes and removals
        probe = self.cdi_dir / ".kubeacc-write-check"
        write_atomic(probe, b"ok\n")
        probe.unlink()
        metadata.leftovers(self.state_dir, self.checkpoint.claims)
        on_disk = cdi.spec_uids(self.cdi_dir)
        removed = sorted(on_disk - self.checkpoint.claims.keys())
        for uid in removed:
            cdi.remove_spec(self.cdi_dir, uid)
        rewritten = []
        for uid, claim in self.checkpoint.claims.items():
            path = cdi.spec_path(self.cdi_dir, uid)
            if uid not in on_disk or _read(path) != claim.cdi_spec:
                cdi.write_spec(self.cdi_dir, uid, claim.cdi_spec)
                rewritten.append(uid)
        return removed, rewritten

    def _checked(self, refs: Iterable[ClaimRef], out: dict[str, str]) -> dict[str, ClaimRef]:
        """The well-formed references by UID; an error in ``out`` for each other one."""
        good: dict[str, ClaimRef] = {}
        for ref in refs:
            err = ref_error(ref)
            seen = good.get(ref.uid)
            if not err and seen is not None and seen != ref:
                err = f"claim UID {ref.uid} named twice, as {seen.namespace}/{seen.name} too"
            if err:
                log.warning("refused claim reference: %s", err)
                out[ref.uid] = err
                good.pop(ref.uid, None)
            elif ref.uid not in out:
                good[ref.uid] = ref
        return good

    @staticmethod
    def _same_claim(ref: ClaimRef, done: PreparedClaim) -> str:
        if (done.namespace, done.name) == (ref.namespace, ref.name):
            return ""
        return (
            f"claim UID {ref.uid} is prepared as ResourceClaim {done.namespace}/{done.name}, "
            f"not {ref.namespace}/{ref.name}"
        )

    # -- prepare ----------------------------------------------------------------------------
    def prepare(self, refs: Iterable[ClaimRef]) -> dict[str, PrepareResult]:
        refs = list(refs)
        with self.metrics.prepare_seconds.time():
            out = self._prepare_claims(refs)
        self._write_status(
            (ref, res.devices) for ref in refs if (res := out.get(ref.uid)) and not res.error
        )
        self.metrics.prepare_errors.inc(sum(1 for r in out.values() if r.error))
        self._count()
        self._changed()
        return out

    def _write_status(self, done: Iterable[tuple[ClaimRef, Sequence[PreparedDevice]]]) -> None:
        """Queue the ``status.devices`` entries of prepared claims (none without a writer)."""
        if self.status is None:
            return
        infos = self.devices()
        for ref, devices in done:
            seen = self._described(ref.uid)
            entries = device_entries(self.node, devices, infos, seen, self.network)
            self.status.prepared(ref.namespace, ref.name, ref.uid, entries)

    def start_status(self, writer: DeviceStatusWriter) -> None:
        """Start writing claims' ``status.devices`` with ``writer``; the claims whose devices
        :meth:`reconcile` made again (a MIG instance's new UUID after a reboot) are written
        first, so their status no longer names what the reboot took."""
        self.status = writer
        writer.start()
        with self.lock:
            redone = [
                (ClaimRef(c.namespace, c.name, uid), c.devices)
                for uid in self._remade
                if (c := self.checkpoint.claims.get(uid)) is not None
            ]
            self._remade.clear()
        self._write_status(redone)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _prepare_claims(self, refs: Iterable[ClaimRef]) -> dict[str, PrepareResult]:
        errors: dict[str, str] = {}
        todo = self._checked(refs, errors)
        out = {uid: PrepareResult(error=e) for uid, e in errors.items()}
        deadline = time.monotonic() + self.api_budget
        again: dict[str, PreparedClaim] = {}  # prepared already: the kubelet asks again
        with self.guard.hold(set(todo)):
            with self.lock:
                fresh = []
                for uid, ref in todo.items():
                    done = self.checkpoint.claims.get(uid)
                    if done is None:
                        fresh.append(ref)
                    elif err := self._same_claim(ref, done):
                        out[uid] = PrepareResult(error=err)
                    else:
                        out[uid] = PrepareResult(devices=done.devices)
                        again[uid] = done
            for uid, done in again.items():  # FPGA programming: not under the driver lock
                if err := self._again(todo[uid], done):
                    out[uid] = PrepareResult(error=err)
            built: dict[str, ClaimWork] = {}
            for ref in fresh:  # API server and the kinds' prepare: not under the driver lock
                try:
                    built[ref.uid] = self._prepare_one(ref, deadline)
                except ClaimError as exc:
                    log.warning("prepare %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
                    out[ref.uid] = PrepareResult(error=str(exc))
                    self._abandon([ref.uid])
                except Exception as exc:  # API server away or slow, ...
                    msg = f"prepare failed: {exc.__class__.__name__}: {exc}".splitlines()[0]
                    log.error("prepare %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, msg)
                    out[ref.uid] = PrepareResult(error=msg)
                    self._abandon([ref.uid])
            if built:
                self._free_stale_holders(built, out)
            if built:
                with self.lock:
                    self._commit(built, out)
        return out

    def _free_stale_holders(
        self, built: dict[str, ClaimWork], out: dict[str, PrepareResult]
    ) -> None:
        """Unprepare the unused claims still recorded on a whole device a fresh claim was
        allocated (kubeacc.agent.dra.stale); a claim whose device another claim in use holds is
        not prepared (dropped from ``built``, with its error)."""
        recorded = self.prepared()
        for uid, work in list(built.items()):
            assert work.prepared is not None
            mine = {(d.pool, d.device) for d in work.prepared.devices if d.share_id is None}
            mine -= unused.admin_devices(work.claim)
            for huid, (held, device) in unused.holders(recorded, mine, set(built)).items():
                ref = ClaimRef(held.namespace, held.name, huid)
                if err := self._free_holder(ref, device, work.where):
                    out[uid] = PrepareResult(
                        error=f"device {device} is still prepared for claim {ref.namespace}/"
                        f"{ref.name} ({huid}): {err}"
                    )
                    self._abandon([uid])
                    del built[uid]
                    break

    def _free_holder(self, ref: ClaimRef, device: str, claimant: str) -> str:
        """Free ``device`` of the recorded claim ``ref`` for ``claimant``: unprepare ``ref`` if
        it is unused (read with it held). "" when the device may be prepared for the claimant
        (freed, unprepared meanwhile by the kubelet, or an admin-access allocation that shares
        it by design), else why not."""
        read: list[dict[str, Any] | None] = []

        def why(r: ClaimRef) -> str:
            read.append(self.claims.get(r.namespace, r.name, r.uid))
            return unused.unused_reason(read[-1], r.uid)

        try:
            done = self.unprepare_unused([ref], why)
        except Exception as exc:  # API server away: the kubelet retries
            return f"cannot read it: {exc.__class__.__name__}"
        if ref.uid in done:
            reason, err = done[ref.uid]
            if not err:
                log.info(
                    "unprepared claim %s/%s (%s): its device %s is allocated to %s",
                    ref.namespace,
                    ref.name,
                    reason,
                    device,
                    claimant,
                )
            return err
        if read and device not in {d for _, d in unused.admin_devices(read[-1])}:
            return "it is still allocated"
        return ""

    def _again(self, ref: ClaimRef, done: PreparedClaim) -> str:
        """A prepared claim asked for again: each kind's check (an FPGA's bitstream still
        there); the first error, or ""."""
        for kind in self.kinds:
            if err := kind.again(ref, done):
                return err
        return ""

    def _abandon(self, uids: list[str]) -> None:
        """Claims not prepared after all: the kinds undo what they made (reverse order)."""
        for kind in reversed(self.kinds):
            kind.abandon(uids)

    def _commit(self, built: dict[str, ClaimWork], out: dict[str, PrepareResult]) -> None:
        """The kinds' commits (GPU settings), CDI specs, then one checkpoint record for all of
        them; errors per claim (a claim that fails is abandoned by the kinds)."""
        written: dict[str, PreparedClaim] = {}
        for uid, work in built.items():
            claim = work.prepared
            assert claim is not None
            others = [*self.checkpoint.claims.items(), *written.items()]
            try:
                for kind in self.kinds:
                    kind.commit(work, others)
            except ClaimError as exc:
                log.warning("prepare %s/%s (%s): %s", claim.namespace, claim.name, uid, exc)
                out[uid] = PrepareResult(error=str(exc))
                self._abandon([uid])
                continue
            step = "writing the device metadata"  # the files the CDI spec mounts, first
            try:
                metadata.write(self.state_dir, uid, work.metadata)
                step = "writing the CDI spec"
                cdi.write_spec(self.cdi_dir, uid, claim.cdi_spec)
            except OSError as exc:
                metadata.remove(self.state_dir, uid)
                msg = f"{step} failed: {exc.strerror or exc}"
                log.error("prepare %s/%s (%s): %s", claim.namespace, claim.name, uid, msg)
                out[uid] = PrepareResult(error=msg)
                self._abandon([uid])
                continue
            written[uid] = claim
        if not written:
            return
        pause_point("prepare-after-cdi", self.state_dir)
        try:
            self.checkpoint.record_prepare(written)
        except OSError as exc:
            msg = f"checkpoint write failed: {exc.strerror or exc}"
            log.error("prepare %s: %s", sorted(written), msg)
            for uid in written:
                with contextlib.suppress(OSError):  # reconcile removes it at the next start
                    cdi.remove_spec(self.cdi_dir, uid)
                metadata.remove(self.state_dir, uid)
                out[uid] = PrepareResult(error=msg)
            self._abandon(list(written))
            return
        for uid, claim in written.items():
            out[uid] = PrepareResult(devices=claim.devices)
        pause_point("prepare-after-checkpoint", self.state_dir)
        if not log.isEnabledFor(logging.DEBUG):  # one line per call only at debug
            return
        for claim in written.values():
            devices = ", ".join(
                f"{d.device} (share {d.share_id})" if d.share_id else d.device
                for d in claim.devices
            )
            log.debug("prepared claim %s/%s: %s", claim.namespace, claim.name, devices)

    def _prepare_one(self, ref: ClaimRef, deadline: float) -> ClaimWork:
        """Read and check the claim, let the kinds prepare its devices, and build its CDI spec
        (written later, by _commit)."""
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        if time.monotonic() >= deadline:
            raise ClaimError(
                f"{where}: not read, this call spent {self.api_budget:.0f} s waiting "
                "for the API server"
            )
        claim = self.claims.get(ref.namespace, ref.name, ref.uid)
        if claim is None:
            raise ClaimError(f"{where} not found")
        uid = claim.get("metadata", {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(f"{where} has UID {uid}, the kubelet asked for {ref.uid}")
        alloc = (claim.get("status") or {}).get("allocation")
        if not alloc:
            raise ClaimError(f"{where} is not allocated")
        results = [
            r for r in alloc.get("devices", {}).get("results", []) if r["driver"] == DRIVER_NAME
        ]
        if not results:
            raise ClaimError(f"{where} has no devices of driver {DRIVER_NAME}")
        try:
            metadata.pod_claim_name(claim)
        except ValueError as exc:
            raise ClaimError(f"{where}: {exc}") from None
        known = self.devices()
        configs = _configs(alloc.get("devices", {}).get("config", []))
        work = ClaimWork(ref, where, claim)
        recorded: dict[str, Any] = {}
        for r in results:
            dev_name, pool = r["device"], r["pool"]
            if pool != self.node:
                raise ClaimError(
                    f"{where}: device {dev_name} is allocated from pool {pool!r}, "
                    f"not from this node's pool {self.node!r}"
                )
            info = known.get(dev_name)
            if info is None:
                raise ClaimError(f"{where}: device {dev_name} is not published by this node")
            dev = DeviceWork(work, r, info, [], info.device_nodes, {})
            for requests, params, from_class in configs:
                if requests and not _applies(r["request"], requests):
                    continue
                try:
                    cfg = parse_config(params)
                except ConfigError as exc:
                    raise ClaimError(f"{where}: {exc}") from None
                if not applies_to(cfg, info.type):
                    raise ClaimError(
                        f"{where}: {config_kind(cfg)} does not apply to {info.type} device "
                        f"{dev_name} (request {r['request']})"
                    )
                dev.configs.append((cfg, from_class))
                dev.env.update(config_env(cfg))
                recorded[dev_name] = config_json(cfg)
            work.devices.append(dev)
            for kind in self.kinds:  # a MIG instance, a bitstream, a share's wants
                kind.prepare(dev)
        prepared: list[PreparedDevice] = []
        for dev in work.devices:
            name, share_id = dev.info.name, dev.share_id
            env = {**dev.base_env, **dev.env}
            work.cdi_devices.append(
                cdi.CDIDevice(name, dev.info.bus_id, dev.nodes, env, share_id, dev.mounts)
            )
            prepared.append(
                PreparedDevice(
                    request_names=[dev.result["request"]],
                    pool=dev.result["pool"],
                    device=name,
                    cdi_device_ids=[cdi.device_id(ref.uid, name, share_id)],
                    share_id=share_id or None,
                )
            )
        for kind in self.kinds:  # claim-wide edits: share limits, NVIDIA UUIDs, user space
            kind.finish(work)
        if self.device_metadata:
            seen = {d.info.name: d.runtime_uuid for d in work.devices if d.runtime_uuid}
            contents, first = self._metadata_of(claim, prepared, known, seen)
            work.metadata = contents
            work.cdi_devices = _with_mounts(self.state_dir, claim, work.cdi_devices, first)
        spec = cdi.build_spec(
            ref.uid,
            f"{ref.namespace}/{ref.name}",
            work.cdi_devices,
            self.device_root,
            work.claim_edits,
        )
        work.prepared = PreparedClaim(ref.namespace, ref.name, prepared, spec, recorded)
        return work

    def _metadata_of(
        self,
        claim: Mapping[str, Any],
        prepared: list[PreparedDevice],
        known: Mapping[str, DeviceInfo],
        migs: Mapping[str, str],
    ) -> tuple[dict[str, bytes], dict[str, int]]:
        """A claim's metadata files by request, and the index of each request's first device."""
        entries = {
            entry_key(e): e for e in device_entries(self.node, prepared, known, migs, self.network)
        }
        requests: dict[str, metadata.RequestMetadata] = {}
        first: dict[str, int] = {}
        for i, p in enumerate(prepared):
            for name in p.request_names:
                base = metadata.base_request(name)
                req = requests.setdefault(base, metadata.RequestMetadata(name))
                entry = entries[(p.device, p.share_id or "")]
                dev = metadata.metadata_device(p.pool, p.device, entry)
                if dev not in req.devices:
                    req.devices.append(dev)
                first.setdefault(base, i)
        return metadata.files(claim, requests.values()), first

    def _restore_metadata(self) -> list[str]:
        """Make again the metadata files prepared claims' CDI specs mount but a crash took
        (:mod:`kubeacc.agent.dra.metadata`); the claims' UIDs."""
        known = self.devices()
        done = []
        for uid, claim in self.checkpoint.claims.items():
            paths = metadata.mounted(self.state_dir, uid, claim.cdi_spec)
            if all(metadata.whole(self.state_dir, uid, r) for r in paths):
                continue  # none mounted (prepared with metadata off), or all there
            obj = metadata.claim_object(claim.namespace, claim.name, uid, paths)
            contents, _ = self._metadata_of(obj, claim.devices, known, self._described(uid))
            try:
                metadata.write(self.state_dir, uid, contents)
            except OSError as exc:
                log.error("claim %s: device metadata not restored: %s", uid, exc)
                continue
            done.append(uid)
        return done

    # -- unprepare --------------------------------------------------------------------------
    def unprepare(self, refs: Iterable[ClaimRef]) -> dict[str, str]:
        """Forget the claims; needs no API server. Returns uid -> error ("" = done)."""
        refs = list(refs)
        with self.metrics.unprepare_seconds.time():
            out = self._unprepare_claims(refs, wait=True)
        assert out is not None
        return self._unprepared(refs, out)

    def unprepare_unused(
        self, refs: Iterable[ClaimRef], why: Callable[[ClaimRef], str]
    ) -> dict[str, tuple[str, str]]:
        """Unprepare those of ``refs`` still prepared for which ``why`` (read with the claims
        held, so that no kubelet call for them runs in between) gives a reason; the others are
        left alone. Returns uid -> (reason, error) for each unprepared or failed one. Raises what
        ``why`` raises (API server away), changing nothing."""
        refs = list(refs)
        reasons: dict[str, str] = {}
        out: dict[str, str] = {}
        todo = self._checked(refs, out)
        with self.guard.hold(set(todo)):
            with self.lock:
                present = {u: r for u, r in todo.items() if u in self.checkpoint.claims}
            for uid, ref in present.items():
                if reason := why(ref):
                    reasons[uid] = reason
            if not reasons:
                return {}
            done: dict[str, str] = {}
            with self.metrics.unprepare_seconds.time(), self.lock:
                self._unprepare_held({u: present[u] for u in reasons}, done)
        self._unprepared([present[u] for u in reasons], done)
        return {uid: (reasons[uid], err) for uid, err in done.items()}

    def unprepare_nowait(self, refs: Iterable[ClaimRef]) -> dict[str, str] | None:
        """:meth:`unprepare`, or None at once where it would wait or touch a device.

        It would wait for the driver lock or a claim another call holds, touch a device for a
        claim with MIG instances or GPU settings to undo, or compact the checkpoint (a snapshot
        and its fsyncs). Otherwise an unprepare only renames, appends (no flush:
        kubeacc.agent.dra.checkpoint) and removes files, which is quick enough to run on the
        gRPC loop itself, without the hop to a worker thread.
        """
        refs = list(refs)
        with self.metrics.unprepare_seconds.time():
            out = self._unprepare_claims(refs, wait=False)
        return None if out is None else self._unprepared(refs, out)

    def _slow_unprepare(self, uids: set[str]) -> bool:
        """An unprepare of ``uids`` touches a device or compacts (under :attr:`lock`, which
        guards the kinds' records that need it and the checkpoint)."""
        if any(kind.touches(uids) for kind in self.kinds):
            return True
        return self.checkpoint.compacts_next

    def _unprepared(self, refs: list[ClaimRef], out: dict[str, str]) -> dict[str, str]:
        if self.status is not None:
            for ref in refs:
                if out.get(ref.uid) == "":
                    self.status.unprepared(ref.namespace, ref.name, ref.uid)
        self.metrics.unprepare_errors.inc(sum(1 for e in out.values() if e))
        self._count()
        self._changed()
        return out

    def _unprepare_claims(self, refs: Iterable[ClaimRef], *, wait: bool) -> dict[str, str] | None:
        out: dict[str, str] = {}
        todo = self._checked(refs, out)
        with self.guard.hold(set(todo), wait=wait) as held:
            if not held or not self.lock.acquire(blocking=wait):
                return None
            try:
                if not wait and self._slow_unprepare(set(todo)):
                    return None
                self._unprepare_held(todo, out)
            finally:
                self.lock.release()
        return out

    def _unprepare_held(self, todo: dict[str, ClaimRef], out: dict[str, str]) -> None:
        present: list[str] = []
        for uid, ref in todo.items():
            done = self.checkpoint.claims.get(uid)
            if done is not None and (err := self._same_claim(ref, done)):
                out[uid] = err
            else:
                present.append(uid)
        try:
            self._unprepare(present)
        except (OSError, KindError) as exc:
            msg = f"unprepare failed: {getattr(exc, 'strerror', None) or exc}"
            log.error("unprepare %s: %s", present, msg)
            out.update(dict.fromkeys(present, msg))
        else:
            out.update(dict.fromkeys(present, ""))
            for uid in present:
                if (ref := todo[uid]) is not None:
                    log.debug("unprepared claim %s/%s", ref.namespace, ref.name)

    def _unprepare(self, uids: list[str]) -> None:
        """Specs aside; the kinds undo the devices (MIG instances, GPU sharing settings);
        checkpoint; specs gone. On an error the claims stay prepared (the kubelet retries, each
        retry undoes again): a claim is forgotten only once its GPU is back as it was found."""
        aside: list[str] = []
        try:
            for uid in uids:
                if cdi.set_aside(self.cdi_dir, uid):
                    aside.append(uid)
            for kind in self.kinds:  # devices undone before the claim is forgotten
                kind.unprepare(uids)
            pause_point("unprepare-after-sharing", self.state_dir)
            recorded = [u for u in uids if u in self.checkpoint.claims]
            if recorded:
                self.checkpoint.record_unprepare(recorded)
        except (OSError, KindError):
            for uid in aside:
                with contextlib.suppress(OSError):  # reconcile rewrites it at the next start
                    cdi.put_back(self.cdi_dir, uid)
            raise
        pause_point("unprepare-after-checkpoint", self.state_dir)
        for uid in aside:
            with contextlib.suppress(OSError):  # the claim is unprepared; reconcile cleans up
                cdi.discard(self.cdi_dir, uid)
        for uid in uids:
            metadata.remove(self.state_dir, uid)
        pause_point("unprepare-after-cdi", self.state_dir)

    def prepared(self) -> dict[str, PreparedClaim]:
        with self.lock:
            return dict(self.checkpoint.claims)


def _with_mounts(
    state_dir: Path, claim: Mapping[str, Any], devices: list[cdi.CDIDevice], first: dict[str, int]
) -> list[cdi.CDIDevice]:
    """The claim's CDI devices with each request's metadata mount on the first of its devices
    (:mod:`kubeacc.agent.dra.metadata`)."""
    out = list(devices)
    for request, i in first.items():
        mount = metadata.mount(state_dir, claim, request)
        out[i] = structs.replace(out[i], read_only_mounts=(*out[i].read_only_mounts, mount))
    return out


def _configs(entries: list[dict[str, Any]]) -> list[tuple[list[str], Any, bool]]:
    """Our opaque configs in precedence order: class configs first, then the claim's; each
    with whether it comes from the class (the admin's)."""
    ours = [e for e in entries if (e.get("opaque") or {}).get("driver") == DRIVER_NAME]
    ours.sort(key=lambda e: 0 if e.get("source") == "FromClass" else 1)
    return [
        (e.get("requests") or [], e["opaque"].get("parameters"), e.get("source") == "FromClass")
        for e in ours
    ]


def _applies(request: str, requests: list[str]) -> bool:
    """A config naming ``req`` applies to ``req`` and its sub-requests ``req/sub``."""
    return request in requests or request.split("/", 1)[0] in requests


def _read(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
