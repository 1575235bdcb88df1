"""GPU sharing strategies applied on the device for the claims that ask for them.

A ``GpuConfig`` with ``sharing.strategy`` ``TimeSlicing`` or ``MPS`` (from the claim or its
DeviceClass) changes the GPU itself at prepare:

============  =====================================  ===========================================
strategy      compute mode (NVML)                    besides
============  =====================================  ===========================================
TimeSlicing   ``DEFAULT`` (processes time-slice)     the time slice, when not ``Default``
MPS           ``EXCLUSIVE_PROCESS`` (the MPS server) the GPU's MPS control daemon started
============  =====================================  ===========================================

The first claim that uses a GPU this way applies the settings, later ones (shares of a
memory-shared GPU, or other claims of the same GPU) must ask for the same strategy and time
slice or are refused with the reason, and the last one to go undoes them: daemon stopped, time
slice and compute mode back to what they were before.

What is applied is recorded in ``<state-dir>/gpu-sharing.json`` (per GPU: strategy, time slice,
the compute mode and time slice found before, the claims using it), durably and *before* the
device is changed, so an agent killed at any point finds it: :meth:`AppliedSharing.reconcile`
at start drops the claims the checkpoint does not hold (killed between apply and checkpoint),
undoes GPUs left without claims, applies again the compute mode and time slice of a GPU still
in use that a node reboot or GPU reset put back to defaults, restarts a missing MPS daemon of a
GPU still in use and stops daemons nobody records. Every undo step can be repeated, so a crash
halfway through one is finished by the next start.

The order at unprepare is the product's guarantee: the GPU is put back *before* the claim is
forgotten. :meth:`AppliedSharing.release` undoes the GPUs whose last claim goes and raises
:class:`SharingError` when an undo fails; the claim then stays in the record (and in the
checkpoint), the kubelet's unprepare fails with the reason and is retried, and each retry tries
the undo again. So an unprepared claim always means a GPU back as it was found.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
import pynvml

from kubeacc.agent.dra.sharing.mps import CONTAINER_PIPE_DIR, ENV_PIPE, MpsDaemons, MpsError
from kubeacc.agent.dra.sharing.timeslice import TIMESLICES, ControlError, GpuControl
from kubeacc.crds.api import TimeSlice
from kubeacc.crds.opaque import GpuConfig, SharingStrategy
from kubeacc.model.accelerator import is_bdf
from kubeacc.node.atomic import write_atomic

log = logging.getLogger(__name__)

STATE_FILE = "gpu-sharing.json"
MODES = {
    SharingStrategy.TIME_SLICING: pynvml.NVML_COMPUTEMODE_DEFAULT,
    SharingStrategy.MPS: pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
}


class _Entry(msgspec.Struct):
    """The shape of one GPU's record in the state file (checked at load)."""

    device: str
    uuid: str
    strategy: Literal["TimeSlicing", "MPS"]
    timeSlice: Literal["Default", "Short", "Medium", "Long"]
    previousComputeMode: int
    claims: list[str]
    previousTimeSlice: int | None = None


def check_record(path: Path, gpus: dict[str, Any]) -> None:
    """ValueError (one line, with the path) unless every key is a PCI bus id and every entry
    has the shape :meth:`AppliedSharing._save` writes: a hand-edited or damaged record must
    not reach the device, the MPS daemons' directories or a traceback."""
    for bus_id, entry in gpus.items():
        if not is_bdf(bus_id):
            raise ValueError(f"{path}: {bus_id[:80]!r} is not a PCI bus id (dddd:bb:dd.f)")
        try:
            msgspec.convert(entry, _Entry)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{path}: GPU {bus_id}: {exc}") from None


class SharingError(Exception):
    """The claim's sharing strategy cannot be applied (the message goes to the kubelet)."""


@dataclass(frozen=True)
class GpuWant:
    """What one claim asks of one GPU."""

    device: str
    bus_id: str
    strategy: SharingStrategy
    time_slice: TimeSlice = TimeSlice.DEFAULT

    @classmethod
    def of(cls, cfg: GpuConfig, device: str, bus_id: str) -> GpuWant | None:
        """The want of a GpuConfig, or None when it changes nothing on the device."""
        sharing = cfg.sharing
        if sharing is None or sharing.strategy not in MODES or not bus_id:
            return None
        return cls(device, bus_id, sharing.strategy, sharing.time_slice)

    def describe(self) -> str:
        if self.strategy is SharingStrategy.TIME_SLICING:
            return f"{self.strategy.value} (time slice {self.time_slice.value})"
        return self.strategy.value


def want_of(
    sharing: AppliedSharing | None,
    cfg: GpuConfig | None,
    device: str,
    bus_id: str,
    wants: list[GpuWant],
) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """Add what ``cfg`` asks of the GPU to the claim's ``wants``; the CDI edits (env, mounts as
    (host path, container path)) the device gets for it. SharingError when it cannot be had."""
    want = GpuWant.of(cfg, device, bus_id) if cfg is not None else None
    if want is None:
        return {}, ()
    if sharing is None:
        raise SharingError(
            f"device {device}: this agent does not apply GPU sharing strategies ({want.describe()})"
        )
    if want.strategy is SharingStrategy.MPS and any(
        w.strategy is SharingStrategy.MPS and w.bus_id != bus_id for w in wants
    ):
        raise SharingError(
            "MPS on more than one GPU in one claim is not supported "
            "(a container has one MPS pipe directory)"
        )
    wants.append(want)
    if want.strategy is not SharingStrategy.MPS:
        return {}, ()
    pipe = str(sharing.daemons.pipe_dir(bus_id))
    return {ENV_PIPE: CONTAINER_PIPE_DIR}, ((pipe, CONTAINER_PIPE_DIR),)


class AppliedSharing:
    """Applies, records and undoes the GPU sharing strategies of prepared claims."""

    def __init__(self, state_dir: Path, control: GpuControl, daemons: MpsDaemons) -> None:
        self.path = state_dir / STATE_FILE
        self.control = control
        self.daemons = daemons
        self.gpus: dict[str, dict[str, Any]] = self._load()

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise ValueError(f"{self.path}: not JSON: {exc}") from None
        gpus = data.get("gpus", {}) if isinstance(data, dict) else None
        if not isinstance(gpus, dict):
            raise ValueError(f"{self.path}: no 'gpus' object")
        check_record(self.path, gpus)
        return gpus

    def _save(self, gpus: dict[str, dict[str, Any]] | None = None) -> None:
        """Write ``gpus`` (default: the record in memory) durably."""
        text = json.dumps({"gpus": self.gpus if gpus is None else gpus}, indent=1, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, text.encode())

    # -- prepare / unprepare --------------------------------------------------------------------
    def acquire(self, uid: str, wants: Sequence[GpuWant]) -> None:
        """Apply each want for claim ``uid``; all or nothing (SharingError names the reason)."""
        done: list[str] = []
        try:
            for want in wants:
                self._acquire_one(uid, want)
                done.append(want.bus_id)
        except (SharingError, OSError) as exc:
            with contextlib.suppress(OSError):  # never prepared: a failed undo is retried
                self._release([uid], done, keep_failed=False)
            if isinstance(exc, OSError):
                raise SharingError(f"recording the GPU settings failed: {exc}") from None
            raise

    def _acquire_one(self, uid: str, want: GpuWant) -> None:
        entry = self.gpus.get(want.bus_id)
        if entry is not None and not entry["claims"]:
            self._undo(want.bus_id, entry)  # left by an undo that failed: finish it first
            entry = self.gpus.get(want.bus_id)
        if entry is not None:
            if (entry["strategy"], entry["timeSlice"]) != (want.strategy, want.time_slice):
                users = ", ".join(entry["claims"])
                raise SharingError(
                    f"GPU {want.device} is set up for {describe_entry(entry)} by claim(s) {users}; "
                    f"this claim asks for {want.describe()}"
                )
            if uid not in entry["claims"]:
                entry["claims"].append(uid)
                self._save()
            return
        try:
            uuid = self.control.uuid(want.bus_id)
            previous = self.control.compute_mode(want.bus_id)
        except ControlError as exc:
            raise SharingError(f"{want.describe()} on GPU {want.device}: {exc}") from None
        entry = {
            "device": want.device,
            "uuid": uuid,
            "strategy": want.strategy.value,
            "timeSlice": want.time_slice.value,
            "previousComputeMode": previous,
            "claims": [uid],
        }
        if want.time_slice != TimeSlice.DEFAULT:
            # what to put back; a GPU that cannot say has the driver's default, 0
            entry["previousTimeSlice"] = self.control.timeslice(want.bus_id, uuid) or 0
        self.gpus[want.bus_id] = entry
        self._save()  # before the device changes: a crash from here on is undone at start
        try:
            self._apply(want, uuid)
        except (ControlError, MpsError) as exc:
            entry["claims"] = []
            self._undo(want.bus_id, entry)
            raise SharingError(f"GPU {want.device} cannot do {want.describe()}: {exc}") from None
        log.info("GPU %s: %s applied for claim %s", want.device, want.describe(), uid)

    def _apply(self, want: GpuWant, uuid: str) -> None:
        self.control.set_compute_mode(want.bus_id, MODES[want.strategy])
        if want.strategy is SharingStrategy.TIME_SLICING and want.time_slice != TimeSlice.DEFAULT:
            self.control.set_timeslice(want.bus_id, uuid, TIMESLICES[want.time_slice])
        if want.strategy is SharingStrategy.MPS:
            self.daemons.start(want.bus_id, uuid)

    def release(self, uids: Iterable[str]) -> None:
        """The claims are gone: undo the GPUs they were the last users of, before they are
        forgotten. SharingError (claims kept, so a retry undoes again) when an undo fails."""
        failed = self._release(list(uids), list(self.gpus))
        if failed:
            raise SharingError("; ".join(failed))

    def abandon(self, uids: Iterable[str]) -> None:
        """Claims whose prepare failed after their GPU settings were applied: undo what only
        they used; an undo that fails is finished by the GPU's next claim or the next start."""
        self._release(list(uids), list(self.gpus), keep_failed=False)

    def _release(
        self, uids: list[str], bus_ids: Iterable[str], keep_failed: bool = True
    ) -> list[str]:
        """Drop ``uids`` from the GPUs; a GPU whose last claim goes is undone first and, when
        that fails, keeps its claims (``keep_failed``) or none (the undo is finished by the
        next claim of the GPU or the next start). Returns the failed undos' reasons."""
        changed = False
        failed: list[str] = []
        for bus_id in list(bus_ids):
            entry = self.gpus.get(bus_id)
            if entry is None:
                continue
            left = [c for c in entry["claims"] if c not in uids]
            if left == entry["claims"]:
                continue
            if left:
                entry["claims"] = left
                changed = True
            elif (err := self._undo(bus_id, entry)) is not None:
                failed.append(err)
                if not keep_failed:
                    entry["claims"] = []
                    changed = True
        if changed:
            self._save()
        return failed

    def _undo(self, bus_id: str, entry: dict[str, Any]) -> str | None:
        """Back to how the GPU was; the entry goes when every step worked. Else the entry stays
        as it is (retried) and the reason is returned."""
        strategy = SharingStrategy(entry["strategy"])
        try:
            if strategy is SharingStrategy.MPS:
                self.daemons.stop(bus_id, entry["uuid"])
            if entry["timeSlice"] != TimeSlice.DEFAULT:
                try:
                    previous = int(entry.get("previousTimeSlice", 0))
                    self.control.set_timeslice(bus_id, entry["uuid"], previous)
                except ControlError as exc:
                    if not exc.not_supported:  # else it was never set: nothing to undo
                        raise
            self.control.set_compute_mode(bus_id, int(entry["previousComputeMode"]))
        except (ControlError, MpsError) as exc:
            err = f"GPU {entry['device']}: undoing {describe_entry(entry)} failed: {exc}"
            log.error("%s (retried)", err)
            self._save()
            return err
        # On disk first: a failed write (full disk) leaves the entry in memory too, so the
        # retry undoes and writes again instead of skipping a GPU the disk still records.
        self._save({b: e for b, e in self.gpus.items() if b != bus_id})
        del self.gpus[bus_id]
        log.info("GPU %s: %s undone", entry["device"], describe_entry(entry))
        return None

    # -- start-up -------------------------------------------------------------------------------
    def reconcile(self, prepared: set[str]) -> list[str]:
        """Make the GPUs agree with the prepared claims (module docstring); what was done."""
        done: list[str] = []
        for bus_id, entry in list(self.gpus.items()):
            stale = [c for c in entry["claims"] if c not in prepared]
            if stale:
                done.append(f"GPU {bus_id}: dropped claims {stale} the checkpoint does not hold")
            entry["claims"] = [c for c in entry["claims"] if c in prepared]
            if not entry["claims"]:
                if self._undo(bus_id, entry) is None:
                    done.append(f"GPU {bus_id}: {describe_entry(entry)} undone")
            else:
                done += self._reapply(bus_id, entry)
                if entry["strategy"] == SharingStrategy.MPS and self.daemons.pid(bus_id) is None:
                    try:
                        self.daemons.start(bus_id, entry["uuid"])
                        done.append(f"GPU {bus_id}: MPS control daemon restarted")
                    except MpsError as exc:
                        log.error("%s", exc)
        mps_gpus = {b for b, e in self.gpus.items() if e["strategy"] == SharingStrategy.MPS}
        for bus_id in self.daemons.running():
            if bus_id not in mps_gpus:
                try:
                    self.daemons.stop(bus_id, "")
                    done.append(f"GPU {bus_id}: stray MPS control daemon stopped")
                except MpsError as exc:
                    log.error("%s", exc)
        if done:
            self._save()
        for line in done:
            log.info("reconciled GPU settings: %s", line)
        return done

    def _reapply(self, bus_id: str, entry: dict[str, Any]) -> list[str]:
        """A GPU still in use whose settings a node reboot or a GPU reset put back to the
        driver's defaults (compute mode, time slice): applied again; what was done."""
        strategy = SharingStrategy(entry["strategy"])
        done: list[str] = []
        try:
            if self.control.compute_mode(bus_id) != MODES[strategy]:
                self.control.set_compute_mode(bus_id, MODES[strategy])
                done.append(f"GPU {bus_id}: compute mode of {describe_entry(entry)} applied again")
            slice_ = TIMESLICES[TimeSlice(entry["timeSlice"])]
            sliced = strategy is SharingStrategy.TIME_SLICING and slice_ != 0
            if sliced and self.control.timeslice(bus_id, entry["uuid"]) != slice_:
                self.control.set_timeslice(bus_id, entry["uuid"], slice_)
                done.append(f"GPU {bus_id}: time slice {entry['timeSlice']} applied again")
        except ControlError as exc:
            log.error("GPU %s: %s not applied again: %s", bus_id, describe_entry(entry), exc)
        return done


def describe_entry(entry: Mapping[str, Any]) -> str:
    """The strategy recorded for a GPU, as in messages."""
    if entry["strategy"] == SharingStrategy.TIME_SLICING:
        return f"{entry['strategy']} (time slice {entry['timeSlice']})"
    return str(entry["strategy"])
