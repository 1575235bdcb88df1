"""Prepare and unprepare claims: the node-side half of DRA, independent of gRPC.

``prepare`` checks every claim reference first (:mod:`kubeacc.agent.dra.refs`), then reads and
checks each new claim (it exists, has the UID the kubelet named, is allocated, its
``kubeacc.io`` devices come from this node's pool and are published here, its opaque config is
valid), writes the claim's CDI spec and then the checkpoint, and only then answers. Each claim
gets its own answer or error.

Locks: reading claims from the API server (and programming an FPGA) happens outside the driver
lock, under a per-claim guard, so one slow or hung API server never blocks an unprepare or the
prepare of a claim already prepared. Each API read has a deadline (``api_budget`` for one call,
well under the kubelet's 45 s). Files (CDI specs, checkpoint) change only under the driver lock.

A share of a memory-shared GPU (an allocation result with a ``shareID``) is prepared as its own
CDI device whose environment carries the share's limits, taken from the result's
``consumedCapacity`` (:mod:`kubeacc.agent.dra.sharing.limits`); its ``shareID`` goes into the
checkpoint and the answer. Shares of one GPU belong to different claims, so unpreparing one
leaves the others as they are.

Unprepare needs no API server and is all or nothing per call: the specs are renamed aside, the
checkpoint entry removed, then the specs deleted; when the checkpoint write fails the specs go
back, so a failure leaves the claims prepared and the kubelet retries.
On start, :meth:`Driver.reconcile` makes the CDI directory agree with the checkpoint.

A MIG partition (:mod:`kubeacc.agent.dra.mig.prepare`) gets its GPU and compute instance on prepare,
before the CDI spec is written (the intent is on disk before the instance exists); a claim that
fails afterwards has them destroyed again. Unprepare destroys them before the checkpoint forgets
the claim; reconcile destroys those of claims the checkpoint does not hold.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec import structs

from kubeacc.agent.dra import metadata
from kubeacc.agent.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice, StateError
from kubeacc.agent.dra.claims import ClaimSource
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.devicestatus import DeviceStatusWriter, NetworkReader, device_entries
from kubeacc.agent.dra.enforcement import claim_enforcement
from kubeacc.agent.dra.fpga.conditions import PROGRAMMED, NotProgrammed
from kubeacc.agent.dra.guard import ClaimGuard
from kubeacc.agent.dra.hooks import pause_point
from kubeacc.agent.dra.mig.model import MigError
from kubeacc.agent.dra.mig.prepare import MigPartitions, Restored
from kubeacc.agent.dra.mig.restore import rewritten
from kubeacc.agent.dra.refs import ClaimRef, ref_error
from kubeacc.agent.dra.sharing.applied import AppliedSharing, GpuWant, SharingError, want_of
from kubeacc.agent.dra.sharing.limits import ShareLimits, UnitLimits, limit_env, share_id_error
from kubeacc.agent.dra.sharing.strategy import claim_strategy_problem, join_problem
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.opaque import (
    ConfigError,
    FpgaConfig,
    GpuConfig,
    SharingStrategy,
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
from kubeacc.node.userspace.nvidia import DriverRootError
from kubeacc.node.userspace.provider import DriverUserSpace

log = logging.getLogger(__name__)

#: (device name, bitstream name, "sha256:<hex>") -> what was done; raises when refused.
FpgaProgrammer = Callable[[str, str, str], str]

#: What the NVIDIA container images read to pick their GPUs: the claim's (MIG) UUIDs.
NVIDIA_VISIBLE = "NVIDIA_VISIBLE_DEVICES"

#: Time one prepare call may spend reading claims (the kubelet gives the call 45 s).
API_BUDGET_S = 20.0

__all__ = ["ClaimError", "ClaimRef", "Driver", "PrepareResult"]


@dataclass
class PrepareResult:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class ClaimError(Exception):
    """This claim cannot be prepared here; the message goes back to the kubelet."""


class Driver:
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
    ) -> None:
        self.node = node
        #: The NVIDIA driver's user space for NVIDIA GPU claims (None: not injected).
        self.user_space = user_space
        self.metrics = metrics or AgentMetrics()
        self.fpga = fpga
        #: Checks a bitstream loaded before binding (kubeacc.agent.dra.fpga.binding).
        self.fpga_verify = fpga_verify
        #: Applies GpuConfig sharing strategies on the GPUs (None: such configs are refused).
        self.sharing = sharing
        #: Creates and destroys MIG instances of partition devices (None: no MIG here).
        self.partitions = partitions
        #: Enforces memory shares in their containers (kubeacc.node.sharelimit).
        self.limiter = limiter or Limiter()
        #: Called (outside the lock) after claims were prepared or unprepared.
        self.on_change = on_change
        #: Writes claims' status.devices after prepare and unprepare (None: not written).
        self.status: DeviceStatusWriter | None = None
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

    def _count(self) -> None:
        """The prepared claims and shares, by what enforces each share (metrics)."""
        self.metrics.prepared_claims.set(len(self.checkpoint.claims))
        tally = dict.fromkeys((e.value for e in Enforcement), 0)
        for uid, claim in self.checkpoint.claims.items():
            for how in claim_enforcement(uid, claim).values():
                tally[how] = tally.get(how, 0) + 1
        for how, n in tally.items():
            self.metrics.shares.labels(how).set(n)

    # -- start-up ---------------------------------------------------------------------------
    def reconcile(self) -> tuple[list[str], list[str]]:
        """Remove CDI specs of claims not in the checkpoint; rewrite missing ones.

        Returns (removed, rewritten) claim UIDs; StateError if the CDI directory is not usable.
        """
        if self.partitions is not None:
            self._restore_partitions()
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
            self._bitstreams_back(ClaimRef(done.namespace, done.name, uid), done)
        if self.sharing is not None:
            with self.lock:
                self.sharing.reconcile(set(self.checkpoint.claims))
        return removed, rewritten

    def _restore_partitions(self) -> None:
        """Destroy the MIG instances of claims not prepared, then make again those of prepared
        claims that are gone (a node reboot, a GPU reset), their specs, checkpoint and metadata
        naming the new instances; before the specs are written and the socket served."""
        assert self.partitions is not None
        try:
            self.partitions.reconcile(set(self.checkpoint.claims))
            minors = {i.mig.gpu_bus_id: i.mig.gpu_minor for i in self.devices().values() if i.mig}
            made = self.partitions.restore(set(self.checkpoint.claims), minors)
        except MigError as exc:  # NVML away: the next start (or unprepare) tries again
            log.error("MIG instances not reconciled: %s", exc)
            return
        by_claim: dict[str, list[Restored]] = {}
        for r in made:
            by_claim.setdefault(r.claim, []).append(r)
        with self.lock:
            changed = {
                uid: rewritten(self.checkpoint.claims[uid], uid, rs, self.device_root)
                for uid, rs in by_claim.items()
            }
            if not changed:
                return
            try:
                self.checkpoint.record_prepare(changed)
            except OSError as exc:  # the old specs stay; the next start tries again
                log.error("MIG instances made again, checkpoint not updated: %s", exc)
                return
            for uid in changed:
                metadata.remove(self.state_dir, uid)  # made again with the new UUIDs

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
        if self.status is not None:
            infos = self.devices()
            for ref in refs:
                res = out.get(ref.uid)
                if res is not None and not res.error:
                    migs = self.partitions.uuids(ref.uid) if self.partitions else None
                    entries = device_entries(self.node, res.devices, infos, migs, self.network)
                    self.status.prepared(ref.namespace, ref.name, ref.uid, entries)
        self.metrics.prepare_errors.inc(sum(1 for r in out.values() if r.error))
        self._count()
        self._changed()
        return out

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
                if err := self._bitstreams_back(todo[uid], done):
                    out[uid] = PrepareResult(error=err)
            built: dict[str, PreparedClaim] = {}
            wants: dict[str, list[GpuWant]] = {}
            metas: dict[str, dict[str, bytes]] = {}  # claim: its device metadata files
            for ref in fresh:  # API server and FPGA programming: not under the driver lock
                try:
                    built[ref.uid] = self._prepare_one(ref, deadline, wants, metas)
                except ClaimError as exc:
                    log.warning("prepare %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
                    out[ref.uid] = PrepareResult(error=str(exc))
                    self._release(ref.uid)
                except Exception as exc:  # API server away or slow, ...
                    msg = f"prepare failed: {exc.__class__.__name__}: {exc}".splitlines()[0]
                    log.error("prepare %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, msg)
                    out[ref.uid] = PrepareResult(error=msg)
                    self._release(ref.uid)
            if built:
                with self.lock:
                    self._commit(built, out, wants, metas)
        return out

    def _bitstreams_back(self, ref: ClaimRef, done: PreparedClaim) -> str:
        """A prepared claim's FPGAs still carry their bitstreams, or are programmed again (a
        node reboot or power cycle can clear a card): the kubelet asks again for the pods it
        restarts, and a container must not start on an empty card. The error, or ""."""
        if self.fpga_verify is None:
            return ""
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        for device, params in done.config.items():
            try:
                cfg = parse_config(params)
            except ConfigError:
                continue  # recorded by this agent: never happens
            if isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
                try:
                    self._verify(where, device, cfg.bitstream.name, cfg.bitstream.digest)
                except ClaimError as exc:
                    log.warning("prepare %s (%s): %s", where, ref.uid, exc)
                    return str(exc)
        return ""

    def _release(self, uid: str) -> None:
        """Destroy the MIG instances a failed prepare of ``uid`` made (reconcile retries)."""
        if self.partitions is None:
            return
        try:
            self.partitions.release({uid})
        except MigError as exc:
            log.error("claim %s: %s", uid, exc)

    def _commit(
        self,
        built: dict[str, PreparedClaim],
        out: dict[str, PrepareResult],
        wants: dict[str, list[GpuWant]],
        metas: dict[str, dict[str, bytes]],
    ) -> None:
        """GPU settings, CDI specs, then one checkpoint record for all of them; errors per
        claim (a claim that fails after its GPU settings were applied gives them back)."""
        written: dict[str, PreparedClaim] = {}
        for uid, claim in built.items():
            applied = self.sharing.gpus if self.sharing is not None else {}
            others = [*self.checkpoint.claims.items(), *written.items()]
            if problem := join_problem(uid, claim, wants.get(uid, []), applied, others):
                log.warning("prepare %s/%s (%s): %s", claim.namespace, claim.name, uid, problem)
                out[uid] = PrepareResult(
                    error=f"ResourceClaim {claim.namespace}/{claim.name}: {problem}"
                )
                self._release(uid)
                continue
            if wants.get(uid) and self.sharing is not None:
                try:
                    self.sharing.acquire(uid, wants[uid])
                except SharingError as exc:
                    log.warning("prepare %s/%s (%s): %s", claim.namespace, claim.name, uid, exc)
                    out[uid] = PrepareResult(
                        error=f"ResourceClaim {claim.namespace}/{claim.name}: {exc}"
                    )
                    self._release(uid)
                    continue
            step = "writing the device metadata"  # the files the CDI spec mounts, first
            try:
                metadata.write(self.state_dir, uid, metas.get(uid, {}))
                step = "writing the CDI spec"
                cdi.write_spec(self.cdi_dir, uid, claim.cdi_spec)
            except OSError as exc:
                self._give_back([uid])
                metadata.remove(self.state_dir, uid)
                msg = f"{step} failed: {exc.strerror or exc}"
                log.error("prepare %s/%s (%s): %s", claim.namespace, claim.name, uid, msg)
                out[uid] = PrepareResult(error=msg)
                self._release(uid)
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
                self._release(uid)
            self._give_back(list(written))
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

    def _give_back(self, uids: list[str]) -> None:
        """Undo the GPU settings of claims that were not prepared after all."""
        if self.sharing is not None:
            with contextlib.suppress(OSError):  # reconcile finishes it at the next start
                self.sharing.abandon(uids)

    def _prepare_one(
        self,
        ref: ClaimRef,
        deadline: float,
        wants: dict[str, list[GpuWant]],
        metas: dict[str, dict[str, bytes]],
    ) -> PreparedClaim:
        """Read and check the claim and build its CDI spec (written later, by _commit)."""
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
        cdi_devices: list[cdi.CDIDevice] = []
        prepared: list[PreparedDevice] = []
        recorded: dict[str, Any] = {}
        units: list[UnitLimits] = []
        enforced: dict[str, tuple[str, bool, bool]] = {}  # share device: vendor, MPS, enforce
        visible: dict[str, str] = {}  # NVIDIA device: its (MIG) UUID
        migs: dict[str, str] = {}  # partition device: its MIG device UUID
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
            env: dict[str, str] = {}
            gpu_cfg: GpuConfig | None = None
            enforce = True
            nodes = info.device_nodes
            if info.mig is not None:
                nodes, env = self._partition(where, ref.uid, info)
                migs[dev_name] = env[NVIDIA_VISIBLE]
            if info.nvidia_gpu:
                visible[dev_name] = env.get(NVIDIA_VISIBLE, info.uuid)
            strategy_from_class = False
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
                if isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
                    bitstream = (dev_name, cfg.bitstream.name, cfg.bitstream.digest)
                    if PROGRAMMED in (r.get("bindingConditions") or []):
                        self._verify(where, *bitstream)
                    else:
                        self._program(where, *bitstream)
                if isinstance(cfg, GpuConfig) and cfg.enforce is not None:
                    if not from_class and not cfg.enforce:
                        raise ClaimError(
                            f"{where}: GpuConfig enforce: false is honoured only from a "
                            "DeviceClass: a claim cannot turn its share's limits off"
                        )
                    enforce = cfg.enforce if from_class else enforce
                if isinstance(cfg, GpuConfig) and cfg.sharing is not None:
                    gpu_cfg = cfg  # the claim's own config wins over its class's
                    strategy_from_class = from_class
                env.update(config_env(cfg))
                recorded[dev_name] = config_json(cfg)
            if info.mig is not None and gpu_cfg is not None:
                raise ClaimError(
                    f"{where}: device {dev_name} is a MIG partition: a GpuConfig sharing "
                    "strategy would change the whole GPU"
                )
            share_id = r.get("shareID") or ""
            if share_id and gpu_cfg is not None and gpu_cfg.sharing and not strategy_from_class:
                strategy = gpu_cfg.sharing.strategy.value
                raise ClaimError(f"{where}: {claim_strategy_problem(dev_name, strategy)}")
            try:  # a sharing strategy to apply on the GPU (at commit), and its CDI edits
                more_env, mounts = want_of(
                    self.sharing, gpu_cfg, dev_name, info.bus_id, wants.setdefault(ref.uid, [])
                )
            except SharingError as exc:
                raise ClaimError(f"{where}: {exc}") from None
            env.update(more_env)
            share: ShareLimits | None = None
            if share_id:
                if err := share_id_error(share_id):
                    raise ClaimError(f"{where}: device {dev_name}: {err}")
                try:
                    share = ShareLimits.from_consumed(
                        r.get("consumedCapacity") or {}, info.memory_bytes
                    )
                except ValueError as exc:
                    raise ClaimError(f"{where}: device {dev_name}: {exc}") from None
            if info.bus_id:
                units.append(UnitLimits(info.vendor, share, info.memory_bytes))
            if share is not None:
                mps = (
                    gpu_cfg is not None
                    and gpu_cfg.sharing is not None
                    and (gpu_cfg.sharing.strategy is SharingStrategy.MPS)
                )
                enforced[dev_name] = (info.vendor, mps, enforce)
            cdi_devices.append(cdi.CDIDevice(dev_name, info.bus_id, nodes, env, share_id, mounts))
            prepared.append(
                PreparedDevice(
                    request_names=[r["request"]],
                    pool=pool,
                    device=dev_name,
                    cdi_device_ids=[cdi.device_id(ref.uid, dev_name, share_id)],
                    share_id=share_id or None,
                )
            )
        limits = limit_env(units)
        if limits:  # every share's own CDI device carries the claim's limits and their means
            cdi_devices = [
                self._enforced(d, limits, ref.uid, *enforced[d.name]) if d.share_id else d
                for d in cdi_devices
            ]
        if self.device_metadata:
            contents, first = self._metadata_of(claim, prepared, known, migs)
            metas[ref.uid] = contents
            cdi_devices = _with_mounts(self.state_dir, claim, cdi_devices, first)
        claim_edits = self._user_space(where) if visible else None
        if uuids := ",".join(dict.fromkeys(u for u in visible.values() if u)):
            cdi_devices = [  # the same list on each: the device injected last sets it
                structs.replace(d, env={**d.env, NVIDIA_VISIBLE: uuids}) if d.name in visible else d
                for d in cdi_devices
            ]
        spec = cdi.build_spec(
            ref.uid, f"{ref.namespace}/{ref.name}", cdi_devices, self.device_root, claim_edits
        )
        return PreparedClaim(ref.namespace, ref.name, prepared, spec, recorded)

    def _metadata_of(
        self,
        claim: Mapping[str, Any],
        prepared: list[PreparedDevice],
        known: Mapping[str, DeviceInfo],
        migs: Mapping[str, str],
    ) -> tuple[dict[str, bytes], dict[str, int]]:
        """A claim's metadata files by request, and the index of each request's first device."""
        entries = {
            e["device"]: e for e in device_entries(self.node, prepared, known, migs, self.network)
        }
        requests: dict[str, metadata.RequestMetadata] = {}
        first: dict[str, int] = {}
        for i, p in enumerate(prepared):
            for name in p.request_names:
                base = metadata.base_request(name)
                req = requests.setdefault(base, metadata.RequestMetadata(name))
                dev = metadata.metadata_device(p.pool, p.device, entries[p.device])
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
            migs = self.partitions.uuids(uid) if self.partitions is not None else {}
            contents, _ = self._metadata_of(obj, claim.devices, known, migs)
            try:
                metadata.write(self.state_dir, uid, contents)
            except OSError as exc:
                log.error("claim %s: device metadata not restored: %s", uid, exc)
                continue
            done.append(uid)
        return done

    def _user_space(self, where: str) -> dict[str, Any] | None:
        """The NVIDIA driver's user space for the claim's container (kubeacc.node.userspace)."""
        if self.user_space is None:
            return None
        try:
            return self.user_space.nvidia_edits()
        except DriverRootError as exc:
            raise ClaimError(f"{where}: NVIDIA driver user space: {exc}") from None

    def _enforced(
        self,
        dev: cdi.CDIDevice,
        limits: Mapping[str, str],
        uid: str,
        vendor: str,
        mps: bool,
        enforce: bool,
    ) -> cdi.CDIDevice:
        """A share's CDI device with the claim's limits and what enforces them; the claim's
        processes (in every container of a pod) keep one account, named by the claim."""
        how = self.limiter.enforcement(vendor, mps, enforce)
        env, mount = self.limiter.edits(how, uid)
        ro = (*dev.read_only_mounts, mount) if mount else dev.read_only_mounts
        return structs.replace(dev, env={**dev.env, **limits, **env}, read_only_mounts=ro)

    def _partition(
        self, where: str, uid: str, info: DeviceInfo
    ) -> tuple[tuple[str, ...], dict[str, str]]:
        """Create the MIG instance of a partition device: its device nodes and environment."""
        assert info.mig is not None
        if self.partitions is None:
            raise ClaimError(f"{where}: device {info.name} is a MIG partition; NVML is off here")
        try:
            nodes, mig_uuid = self.partitions.create(uid, info.name, info.mig)
        except MigError as exc:
            raise ClaimError(f"{where}: device {info.name}: {exc}") from None
        pause_point("prepare-after-mig", self.state_dir)
        env = {NVIDIA_VISIBLE: mig_uuid, "KUBEACC_MIG_PROFILE": info.mig.profile}
        return (*nodes, *info.device_nodes), env

    def _program(self, where: str, device: str, bitstream: str, digest: str) -> None:
        """Load the claim's bitstream before the container may use the FPGA."""
        if self.fpga is None:
            raise ClaimError(
                f"{where}: FpgaConfig names bitstream {bitstream}, but this agent has no "
                "bitstream library (--bitstream-dir)"
            )
        try:
            done = self.fpga(device, bitstream, digest)
        except Exception as exc:  # ProgrammingRefused, or the API server being away
            raise ClaimError(f"{where}: device {device}: {exc}") from None
        log.info("%s: %s", where, done)

    def _verify(self, where: str, device: str, bitstream: str, digest: str) -> None:
        """The bitstream was loaded before binding: check the card carries it. Should the
        scheduler not have waited for the condition (its gate off while the API server's is
        on), load it now rather than fail the pod."""
        if self.fpga_verify is None:
            self._program(where, device, bitstream, digest)
            return
        try:
            done = self.fpga_verify(device, bitstream, digest)
        except NotProgrammed as exc:
            log.warning("%s: %s; loading it now", where, exc)
            self._program(where, device, bitstream, digest)
            return
        except Exception as exc:
            raise ClaimError(f"{where}: device {device}: {exc}") from None
        log.info("%s: %s", where, done)

    # -- unprepare --------------------------------------------------------------------------
    def unprepare(self, refs: Iterable[ClaimRef]) -> dict[str, str]:
        """Forget the claims; needs no API server. Returns uid -> error ("" = done)."""
        refs = list(refs)
        with self.metrics.unprepare_seconds.time():
            out = self._unprepare_claims(refs, wait=True)
        assert out is not None
        return self._unprepared(refs, out)

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
        guards the sharing records and the checkpoint; the MIG records have their own)."""
        if self.partitions is not None and self.partitions.may_hold(uids):
            return True
        if self.sharing is not None and any(
            uid in gpu["claims"] for gpu in self.sharing.gpus.values() for uid in uids
        ):
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
        except (OSError, MigError, SharingError) as exc:
            msg = f"unprepare failed: {getattr(exc, 'strerror', None) or exc}"
            log.error("unprepare %s: %s", present, msg)
            out.update(dict.fromkeys(present, msg))
        else:
            out.update(dict.fromkeys(present, ""))
            for uid in present:
                if (ref := todo[uid]) is not None:
                    log.debug("unprepared claim %s/%s", ref.namespace, ref.name)

    def _unprepare(self, uids: list[str]) -> None:
        """Specs aside; MIG instances and GPU sharing settings undone; checkpoint; specs gone.
        On an error the claims stay prepared (the kubelet retries, each retry undoes again):
        a claim is forgotten only once its GPU is back as it was found."""
        aside: list[str] = []
        try:
            for uid in uids:
                if cdi.set_aside(self.cdi_dir, uid):
                    aside.append(uid)
            if self.partitions is not None:  # instances go before the claim is forgotten
                self.partitions.release(set(uids))
            if self.sharing is not None:  # and so does the GPU's sharing strategy
                self.sharing.release(uids)
            pause_point("unprepare-after-sharing", self.state_dir)
            recorded = [u for u in uids if u in self.checkpoint.claims]
            if recorded:
                self.checkpoint.record_unprepare(recorded)
        except (OSError, MigError, SharingError):
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
