"""The GPU and compute instances of MIG partitions: created on prepare, destroyed on unprepare.

Prepare of a partition records the intent in ``<state-dir>/mig.json`` (durably) before it
creates anything, then creates the GPU instance at the device's placement and a compute
instance spanning it, and records their ids. Unprepare destroys the compute instance, then the
GPU instance, then forgets the record. At start, :meth:`MigPartitions.reconcile` destroys the
instances of every record whose claim the checkpoint does not hold (an agent killed between
create and checkpoint leaves no orphan). How partitions are published:
:mod:`kubeacc.agent.dra.mig.publish`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pynvml

from kubeacc.agent.dra.checkpoint import StateError
from kubeacc.agent.dra.mig.model import MEMORY_SLICES, GpuMig, MigError, Partition
from kubeacc.agent.dra.mig.nvml import gpu_handles, listed, mig_uuids, nvml_bus, read_gpu
from kubeacc.host import Host
from kubeacc.model import DeviceType, Inventory
from kubeacc.node.atomic import write_atomic

log = logging.getLogger(__name__)

STATE_FILE = "mig.json"
_CAP_MINOR = re.compile(r"DeviceFileMinor:\s*(\d+)")
_CI_PROFILES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}  # compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_*


@dataclass(frozen=True)
class Restored:
    """A prepared claim's instance made again: what its CDI spec must say instead."""

    claim: str
    device: str
    old_uuid: str
    uuid: str
    #: The capability device nodes now (GPU instance, compute instance).
    nodes: tuple[str, ...]


@dataclass
class Record:
    """One partition of a prepared (or being prepared) claim, as ``mig.json`` keeps it."""

    claim: str
    device: str
    gpu_uuid: str
    gpu_bus_id: str
    profile_id: int
    slices: int
    start: int
    size: int
    gi: int | None = None
    ci: int | None = None
    uuid: str = ""


class MigPartitions:
    """Creates and destroys the GPU/compute instances of claims; knows which are ours."""

    def __init__(self, nvml: Callable[[], Any | None], state_dir: Path, host: Host) -> None:
        self._nvml = nvml
        self.path = state_dir / STATE_FILE
        self.host = host
        self.lock = threading.Lock()
        self.records: list[Record] = self._load()

    def _load(self) -> list[Record]:
        try:
            data = json.loads(self.path.read_bytes())
            return [Record(**r) for r in data["records"]]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(f"MIG instance records {self.path} unreadable: {exc}") from None

    def _save(self) -> None:
        doc = {"records": [asdict(r) for r in self.records]}
        data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        write_atomic(self.path, data)

    def nvml(self) -> Any:
        lib = self._nvml()
        if lib is None:
            raise MigError("NVML is not available on this node")
        return lib

    def ours(self) -> set[tuple[str, int, int]]:
        """(GPU uuid, placement start, profile id) of every instance this agent made or is
        about to make."""
        with self.lock:
            return {(r.gpu_uuid, r.start, r.profile_id) for r in self.records}

    def held(self) -> set[str]:
        with self.lock:
            return {r.claim for r in self.records}

    def may_hold(self, claims: set[str]) -> bool:
        """Whether any of ``claims`` has instances, without waiting: True too while another
        call has the records."""
        if not self.lock.acquire(blocking=False):
            return True
        try:
            return any(r.claim in claims for r in self.records)
        finally:
            self.lock.release()

    def uuids(self, claim: str) -> dict[str, str]:
        """The MIG device UUID of each partition device made for ``claim`` (by device name)."""
        with self.lock:
            return {r.device: r.uuid for r in self.records if r.claim == claim and r.uuid}

    # -- discovery ----------------------------------------------------------------------------

    def read(self, inv: Inventory) -> tuple[dict[str, GpuMig], dict[str, dict[int, str]]]:
        """The MIG GPUs of ``inv`` (by device name) and their MIG device UUIDs."""
        gpus = [d for d in inv.devices if d.type is DeviceType.GPU and d.vendor.lower() == "nvidia"]
        if not gpus:
            return {}, {}
        nvml = self._nvml()
        if nvml is None:
            return {}, {}
        handles = gpu_handles(nvml)
        out, uuids = {}, {}
        for dev in gpus:
            h = handles.get(nvml_bus(dev.pci.bus_id)) if dev.pci else None
            if h is None:
                continue
            try:
                mig = read_gpu(nvml, h, dev.pci.bus_id if dev.pci else "")
            except pynvml.NVMLError as exc:
                log.warning("MIG state of %s unreadable: %s", dev.name, exc)
                continue
            if mig is not None and mig.profiles:
                out[dev.name] = mig
                uuids[dev.name] = mig_uuids(nvml, h)
        return out, uuids

    # -- prepare / unprepare ------------------------------------------------------------------

    def create(self, claim: str, device: str, part: Partition) -> tuple[list[str], str]:
        """Create (or find, when a retry comes) the claim's instance; (device nodes, MIG uuid)."""
        if part.fixed_gi is not None:
            if not part.fixed_uuid:
                raise MigError(f"fixed MIG instance gi{part.fixed_gi} has no compute instance")
            return self._nodes(part.gpu_minor, part.fixed_gi, 0), part.fixed_uuid
        nvml = self.nvml()
        with self.lock:
            rec = next((r for r in self.records if (r.claim, r.device) == (claim, device)), None)
            if rec is None:
                rec = Record(
                    claim, device, part.gpu_uuid, part.gpu_bus_id, part.profile_id,
                    part.slices, part.start, part.size,
                )  # fmt: skip
                self.records.append(rec)
                self._save()  # the intent, before anything exists
            try:
                handle = gpu_handles(nvml).get(nvml_bus(part.gpu_bus_id))
                if handle is None:
                    raise MigError(f"GPU {part.gpu_bus_id} not found by NVML")
                nodes, uuid = self._make(nvml, handle, rec, part)
                # Flushed too: a rename whose bytes were not flushed can reach the disk
                # first (a directory fsync, or the file system's own journal commit), and a
                # power loss would then leave an empty file the agent cannot start from.
                self._save()
                return nodes, uuid
            except pynvml.NVMLError as exc:
                raise MigError(
                    f"creating MIG {part.profile} at memory slice {part.start} on GPU "
                    f"{part.gpu_bus_id} failed: {exc}"
                ) from None

    def _make(self, nvml: Any, handle: Any, rec: Record, part: Partition) -> tuple[list[str], str]:
        """The GPU and compute instance of ``rec`` at its placement, made where missing; its
        device nodes and MIG UUID (``rec`` updated, not saved)."""
        if rec.gi is None:
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = part.start, part.size
            gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, part.profile_id, placement)
            rec.gi = int(nvml.nvmlGpuInstanceGetInfo(gi).id)
        gi = nvml.nvmlDeviceGetGpuInstanceById(handle, rec.gi)
        if rec.ci is None:
            ci = nvml.nvmlGpuInstanceCreateComputeInstance(gi, _CI_PROFILES[part.slices])
            rec.ci = int(nvml.nvmlComputeInstanceGetInfo(ci).id)
        uuid = mig_uuids(nvml, handle).get(rec.gi, "")
        if not uuid:
            raise MigError(f"no MIG device for GPU instance {rec.gi}")
        rec.uuid = uuid
        return self._nodes(part.gpu_minor, rec.gi, rec.ci), uuid

    def _nodes(self, minor: int, gi: int, ci: int) -> list[str]:
        base = f"/proc/driver/nvidia/capabilities/gpu{minor}/mig/gi{gi}"
        nodes = [f"/dev/nvidia{minor}"]
        for rel in (f"{base}/access", f"{base}/ci{ci}/access"):
            try:
                text = self.host.path(rel).read_text()
            except OSError as exc:
                raise MigError(f"{rel}: {exc.strerror or exc}") from None
            m = _CAP_MINOR.search(text)
            if m is None:
                raise MigError(f"{rel}: no DeviceFileMinor")
            nodes.append(f"/dev/nvidia-caps/nvidia-cap{m.group(1)}")
        return nodes

    def release(self, claims: Collection[str]) -> None:
        """Destroy the instances of ``claims`` (compute, then GPU instance) and forget them.

        MigError when NVML refuses; what was destroyed is forgotten, the rest stays recorded.
        """
        with self.lock:
            mine = [r for r in self.records if r.claim in claims]
            if not mine:
                return
            nvml = self.nvml()
            handles = gpu_handles(nvml)
            # Placements other claims hold now: never destroyed for a stale record.
            held = {(r.gpu_uuid, r.start, r.profile_id) for r in self.records if r not in mine}
            try:
                for rec in mine:
                    if (rec.gpu_uuid, rec.start, rec.profile_id) not in held:
                        self._destroy(nvml, handles.get(nvml_bus(rec.gpu_bus_id)), rec)
                    self.records.remove(rec)
            finally:
                self._save()

    def _find(self, nvml: Any, handle: Any, rec: Record) -> Any | None:
        """The GPU instance of ``rec``; by placement when the agent died before it learnt the
        id (the placement was allocated to this claim: an instance there is its one)."""
        try:
            if rec.gi is not None:
                return nvml.nvmlDeviceGetGpuInstanceById(handle, rec.gi)
            for gi in listed(
                nvml.nvmlDeviceGetGpuInstances,
                handle,
                rec.profile_id,
                pynvml.c_nvmlGpuInstance_t,
                MEMORY_SLICES,
            ):
                info = nvml.nvmlGpuInstanceGetInfo(gi)
                if int(info.placement.start) == rec.start:
                    rec.gi = int(info.id)
                    return gi
            return None
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_NOT_FOUND:
                return None  # gone already
            raise MigError(f"MIG instance of {rec.gpu_bus_id}: {exc}") from None

    def _destroy(self, nvml: Any, handle: Any, rec: Record) -> None:
        if handle is None:
            return
        gi = self._find(nvml, handle, rec)
        if gi is None:
            return
        try:
            info = nvml.nvmlGpuInstanceGetInfo(gi)
            if (int(info.placement.start), int(info.profileId)) != (rec.start, rec.profile_id):
                return  # the id was reused by someone else's instance: not ours to destroy
            for ci in listed(
                nvml.nvmlGpuInstanceGetComputeInstances,
                gi,
                _CI_PROFILES[rec.slices],
                pynvml.c_nvmlComputeInstance_t,
                MEMORY_SLICES,
            ):
                nvml.nvmlComputeInstanceDestroy(ci)
            nvml.nvmlGpuInstanceDestroy(gi)
        except pynvml.NVMLError as exc:
            raise MigError(
                f"destroying MIG instance gi{rec.gi} of {rec.gpu_bus_id}: {exc}"
            ) from None
        log.info("destroyed MIG instance gi%d on %s (claim %s)", rec.gi, rec.gpu_bus_id, rec.claim)

    def restore(self, prepared: Collection[str], gpu_minors: dict[str, int]) -> list[Restored]:
        """Make again, at their recorded placements, the instances of ``prepared`` claims that
        are gone (a node reboot or a GPU reset destroys every MIG instance; MIG mode stays).

        The claim's allocation names that partition device, so the same placement is the only
        consistent answer (the scheduler never reallocates an allocated claim); the placement is
        still reserved for the claim (its device is published as the claim's). New instances
        have new ids and a new MIG UUID: what changed is returned, for the claim's CDI spec.
        ``gpu_minors``: the ``/dev/nvidiaN`` minor of each GPU by bus id. A placement that can no
        longer be had (another instance there, NVML refusing) is logged and left: the claim's
        containers then fail on its device, as they would on a broken GPU."""
        out: list[Restored] = []
        with self.lock:
            mine = [r for r in self.records if r.claim in prepared and r.uuid]
            if not mine:
                return out
            nvml = self.nvml()
            handles = gpu_handles(nvml)
            for rec in mine:
                handle = handles.get(nvml_bus(rec.gpu_bus_id))
                minor = gpu_minors.get(rec.gpu_bus_id)
                if handle is None or minor is None:
                    log.error(
                        "MIG instance of claim %s: GPU %s not found", rec.claim, rec.gpu_bus_id
                    )
                    continue
                if rec.uuid in mig_uuids(nvml, handle).values():
                    continue  # still there
                old_uuid = rec.uuid
                rec.gi = rec.ci = None
                rec.uuid = ""
                try:
                    part = Partition(
                        profile=f"profile {rec.profile_id}",
                        profile_id=rec.profile_id,
                        slices=rec.slices,
                        start=rec.start,
                        size=rec.size,
                        gpu_uuid=rec.gpu_uuid,
                        gpu_bus_id=rec.gpu_bus_id,
                        gpu_minor=minor,
                    )
                    nodes, uuid = self._make(nvml, handle, rec, part)
                except (MigError, pynvml.NVMLError) as exc:
                    log.error(
                        "MIG instance of claim %s at memory slice %d on %s not made again: %s",
                        rec.claim, rec.start, rec.gpu_bus_id, exc,
                    )  # fmt: skip
                    continue
                finally:
                    self._save()
                out.append(Restored(rec.claim, rec.device, old_uuid, uuid, tuple(nodes[1:])))
                log.info(
                    "MIG instance of claim %s made again at memory slice %d on %s (%s -> %s)",
                    rec.claim, rec.start, rec.gpu_bus_id, old_uuid, uuid,
                )  # fmt: skip
        return out

    def reconcile(self, prepared: Collection[str]) -> list[str]:
        """Destroy the instances of claims not in ``prepared``; their claim UIDs."""
        with self.lock:
            stale = sorted({r.claim for r in self.records if r.claim not in prepared})
        if stale:
            self.release(stale)
            log.info("destroyed MIG instances of claims not prepared: %s", stale)
        return stale
