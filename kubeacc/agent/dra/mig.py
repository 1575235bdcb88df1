"""MIG GPUs as partitionable devices (KEP-4815): what NVML offers, how it is published, and the
GPU/compute instances created on prepare and destroyed on unprepare.

Every GPU that NVML reports in MIG mode is published as

* the whole GPU, consuming all of its counters, and
* one device per (profile, placement) NVML offers, named
  ``<gpu>-mig-<profile>-<start>`` (``gpu-0000-1b-00-0-mig-3g-40gb-4``), consuming the memory
  slices of its placement and its compute slices,

against one counter set per GPU, ``<gpu>-mig``: ``memory-slice-0`` … ``memory-slice-7`` (1
each) and ``compute-slices`` (7). Profile variants (``1g.10gb+me``: all media engines, one
instance at a time) are left out. Two devices of one GPU can be allocated together only if they
do not overlap, so a claim for a partition and a claim for the whole GPU never share silicon.
Counter sets go into slices of their own (Kubernetes 1.35+: a slice has ``sharedCounters`` or
``devices``, not both); devices that consume counters fill at most 64 per slice.

Instances that exist on a GPU and that this agent did not create (made by an administrator,
or at boot) are *fixed*: each is published as a device of its own, ``<gpu>-mig-gi<id>``, that
prepare hands out as it is; placements that overlap a fixed instance and the whole GPU are not
published (the GPU is not whole).

Prepare of a partition records the intent in ``<state-dir>/mig.json`` (durably) before it
creates anything, then creates the GPU instance at the device's placement and a compute
instance spanning it, and records their ids. Unprepare destroys the compute instance, then the
GPU instance, then forgets the record. At start, :meth:`MigPartitions.reconcile` destroys the
instances of every record whose claim the checkpoint does not hold (an agent killed between
create and checkpoint leaves no orphan).
"""

from __future__ import annotations

import ctypes
import json
import logging
import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from kubeacc.agent.dra.atomic import write_atomic
from kubeacc.agent.dra.checkpoint import StateError
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.migmodel import (
    GpuMig,
    Instance,
    MigError,
    Partition,
    Profile,
    counter_set,
    partition_name,
)
from kubeacc.agent.dra.policyshare import MigFilter
from kubeacc.host import Host, select_nvml
from kubeacc.host.files import WarningSink
from kubeacc.model import Device, DeviceType, Inventory
from kubeacc.model.names import (
    MIG_COMPUTE_SLICES_ATTR,
    MIG_ENABLED_ATTR,
    MIG_PARENT_BUS_ATTR,
    MIG_PARENT_UUID_ATTR,
    MIG_PROFILE_ATTR,
    MIG_START_ATTR,
)

log = logging.getLogger(__name__)

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
COMPUTE_COUNTER = "compute-slices"
STATE_FILE = "mig.json"
MIB = 1 << 20
_CAP_MINOR = re.compile(r"DeviceFileMinor:\s*(\d+)")
_CI_PROFILES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}  # compute slices -> NVML_COMPUTE_INSTANCE_PROFILE_*


def _bus(bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` and sysfs' ``0000:1b:00.0`` as one form."""
    return bus_id.lower()[-12:]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# -- NVML reads ---------------------------------------------------------------------------------


def _handles(nvml: Any) -> dict[str, Any]:
    out = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            out[_bus(_text(nvml.nvmlDeviceGetPciInfo(h).busId))] = h
        except pynvml.NVMLError:
            continue
    return out


def _listed(call: Callable[..., Any], target: Any, arg: int, kind: Any, cap: int) -> list[Any]:
    count = ctypes.c_uint(cap)
    items = (kind * cap)()
    call(target, arg, items, ctypes.byref(count))
    return [items[i] for i in range(count.value)]


def read_gpu(nvml: Any, handle: Any, bus_id: str) -> GpuMig | None:
    """The GPU's MIG profiles, placements and instances; None when it is not in MIG mode."""
    try:
        if nvml.nvmlDeviceGetMigMode(handle)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return None
    except pynvml.NVMLError:
        return None
    profiles, instances = [], []
    for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, p)
        except pynvml.NVMLError:
            continue  # not offered by this GPU
        if info.instanceCount == 0:
            continue
        places = _listed(
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            handle,
            info.id,
            pynvml.c_nvmlGpuInstancePlacement_t,
            MEMORY_SLICES,
        )
        name = _text(info.name).removeprefix("MIG ")
        if "+" in name:
            continue  # "1g.10gb+me": a variant (all media engines, one at a time), not offered
        profiles.append(
            Profile(
                p,
                int(info.id),
                name,
                int(info.sliceCount),
                int(info.memorySizeMB),
                tuple((int(x.start), int(x.size)) for x in places),
            )
        )
        for gi in _listed(
            nvml.nvmlDeviceGetGpuInstances,
            handle,
            info.id,
            pynvml.c_nvmlGpuInstance_t,
            MEMORY_SLICES,
        ):
            g = nvml.nvmlGpuInstanceGetInfo(gi)
            instances.append(
                Instance(int(g.id), int(g.profileId), int(g.placement.start), int(g.placement.size))
            )
    return GpuMig(
        bus_id=_bus(bus_id),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
        profiles=tuple(profiles),
        instances=tuple(sorted(instances, key=lambda i: i.gi)),
    )


def _mig_uuids(nvml: Any, handle: Any) -> dict[int, str]:
    """GPU instance id -> the MIG device UUID (of its first compute instance)."""
    out: dict[int, str] = {}
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            out.setdefault(
                int(nvml.nvmlDeviceGetGpuInstanceId(mig)), _text(nvml.nvmlDeviceGetUUID(mig))
            )
        except pynvml.NVMLError:
            continue
    return out


# -- slice entries ------------------------------------------------------------------------------


def _consumes(gpu: str, start: int, size: int, slices: int) -> list[dict[str, Any]]:
    counters = {f"memory-slice-{s}": {"value": "1"} for s in range(start, start + size)}
    counters[COMPUTE_COUNTER] = {"value": str(slices)}
    return [{"counterSet": counter_set(gpu), "counters": counters}]


def counter_sets(gpus: Mapping[str, GpuMig]) -> list[dict[str, Any]]:
    """One counter set per MIG GPU (by slice device name)."""
    out = []
    for name in sorted(gpus):
        counters = {f"memory-slice-{s}": {"value": "1"} for s in range(MEMORY_SLICES)}
        counters[COMPUTE_COUNTER] = {"value": str(COMPUTE_SLICES)}
        out.append({"name": counter_set(name), "counters": counters})
    return out


@dataclass
class Published:
    """What the slice says about the MIG GPUs, and what prepare needs about each partition."""

    #: Whole-GPU entries to replace (name -> entry with counters) or drop (name -> None).
    whole: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    counter_sets: list[dict[str, Any]] = field(default_factory=list)
    index: dict[str, Partition] = field(default_factory=dict)
    #: Partition device name -> its GPU's slice device name.
    owner: dict[str, str] = field(default_factory=dict)

    def add(self, dev: Device, base: Mapping[str, Any], part: Partition) -> None:
        """Publish ``part`` of ``dev`` (whose plain slice entry is ``base``)."""
        entry = _partition_entry(dev, base, part)
        self.partitions.append(entry)
        self.index[entry["name"]] = part
        self.owner[entry["name"]] = dev.name

    def apply(
        self,
        entries: Sequence[dict[str, Any]],
        filters: Mapping[str, MigFilter] | None = None,
    ) -> list[dict[str, Any]]:
        """``entries`` (the plain slice devices) with the MIG GPUs and their partitions.

        ``filters`` (by GPU slice name, from the ``MIG`` policies) keeps of a GPU only the
        placements of the listed profiles, and the whole GPU only when the filter says so;
        fixed instances (made outside the agent) are always published: they exist."""
        filters = filters or {}
        out = []
        for e in entries:
            name = str(e["name"])
            if name not in self.whole:
                out.append(e)
            elif (replaced := self.whole[name]) is not None and (
                name not in filters or filters[name].whole
            ):
                out.append(replaced)
        for e in self.partitions:
            name = str(e["name"])
            part = self.index.get(name)
            rule = filters.get(self.owner.get(name, ""))
            # fixed instances exist: they are published whatever the policy lists
            fixed = part is None or part.fixed_gi is not None
            if rule is None or fixed or (part is not None and part.profile in rule.profiles):
                out.append(e)
        out.sort(key=lambda d: str(d["name"]))
        return out


def _partition_entry(dev: Device, base: Mapping[str, Any], p: Partition) -> dict[str, Any]:
    # Every attribute of its GPU (uuid and pciBusID are the GPU's): a selector written for
    # GPUs must not meet a device without the attribute (a CEL error fails the whole claim).
    attrs = dict(base["attributes"])
    attrs["productName"] = {"string": f"{dev.model} MIG {p.profile}"[:64]}
    attrs[MIG_PROFILE_ATTR] = {"string": p.profile}
    attrs[MIG_START_ATTR] = {"int": p.start}
    attrs[MIG_COMPUTE_SLICES_ATTR] = {"int": p.slices}
    attrs[MIG_PARENT_UUID_ATTR] = {"string": p.gpu_uuid[:64]}
    if dev.pci:
        attrs[MIG_PARENT_BUS_ATTR] = {"string": dev.pci.bus_id}
    name = (
        f"{dev.name}-mig-gi{p.fixed_gi}"
        if p.fixed_gi is not None
        else partition_name(dev.name, p.profile, p.start)
    )
    entry: dict[str, Any] = {
        "name": name,
        "attributes": attrs,
        "capacity": {"kubeacc.io/memory": {"value": str(p.memory_mib * MIB)}},
    }
    if p.fixed_gi is None:
        entry["consumesCounters"] = _consumes(dev.name, p.start, p.size, p.slices)
    if base.get("taints"):
        entry["taints"] = base["taints"]
    return entry


def _partition(
    dev: Device,
    mig: GpuMig,
    prof: Profile,
    start: int,
    size: int,
    fixed_gi: int | None = None,
    fixed_uuid: str = "",
) -> Partition:
    return Partition(
        dev.pci.bus_id if dev.pci else "",
        mig.uuid,
        mig.minor,
        prof.name,
        prof.id,
        prof.slices,
        start,
        size,
        fixed_gi=fixed_gi,
        fixed_uuid=fixed_uuid,
        memory_mib=prof.memory_mib,
    )


def publish(
    inv: Inventory,
    entries: Sequence[dict[str, Any]],
    gpus: Mapping[str, GpuMig],
    ours: Collection[tuple[str, int, int]],
    fixed_uuids: Mapping[str, Mapping[int, str]] | None = None,
) -> Published:
    """The MIG part of the slice. ``gpus``: by slice device name; ``ours``: (GPU uuid, start,
    profile id) of the instances this agent created (they are not fixed ones)."""
    by_name = {str(e["name"]): e for e in entries}
    out = Published()
    for dev in inv.devices:
        mig = gpus.get(dev.name)
        base = by_name.get(dev.name)
        if mig is None or base is None or dev.type is not DeviceType.GPU:
            continue
        fixed = [i for i in mig.instances if (mig.uuid, i.start, i.profile_id) not in ours]
        taken = {s for i in fixed for s in range(i.start, i.start + i.size)}
        profiles = {p.id: p for p in mig.profiles}
        for inst in fixed:
            prof = profiles.get(inst.profile_id)
            if prof is None:
                continue
            fixed_uuid = (fixed_uuids or {}).get(dev.name, {}).get(inst.gi, "")
            out.add(
                dev, base, _partition(dev, mig, prof, inst.start, inst.size, inst.gi, fixed_uuid)
            )
        consuming = not taken
        if taken:
            out.whole[dev.name] = None
        else:
            whole = dict(base)
            whole["attributes"] = {**base["attributes"], MIG_ENABLED_ATTR: {"bool": True}}
            whole["consumesCounters"] = _consumes(dev.name, 0, MEMORY_SLICES, COMPUTE_SLICES)
            out.whole[dev.name] = whole
        for prof in mig.profiles:
            for start, size in prof.placements:
                if taken & set(range(start, start + size)):
                    continue
                out.add(dev, base, _partition(dev, mig, prof, start, size))
                consuming = True
        if consuming:  # a GPU whose fixed instances take it all has no counters to share
            out.counter_sets.extend(counter_sets({dev.name: mig}))
    return out


def nvml_for(host: Host, mode: str) -> Callable[[], Any | None]:
    """The NVML library of the node, looked up per use."""

    def lib() -> Any | None:
        return select_nvml(host, WarningSink(), mode)

    return lib


def device_infos(inv: Inventory, published: Published) -> dict[str, Any]:
    """DeviceInfo of every partition device (what prepare needs), by slice name."""
    by_bus = {d.pci.bus_id: d for d in inv.devices if d.pci}
    out: dict[str, Any] = {}
    for name, part in published.index.items():
        gpu = by_bus.get(part.gpu_bus_id)
        if gpu is None:
            continue
        out[name] = DeviceInfo(
            name=name,
            type=gpu.type.value,
            bus_id=part.gpu_bus_id,
            device_nodes=(),
            healthy=gpu.health.state,
            message=gpu.health.reason,
            vendor=gpu.vendor,
            memory_bytes=part.memory_mib * MIB,
            mig=part,
        )
    return out


# -- instances ----------------------------------------------------------------------------------


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

    def _save(self, durable: bool = True) -> None:
        doc = {"records": [asdict(r) for r in self.records]}
        data = json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"
        write_atomic(self.path, data, durable=durable)

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

    # -- discovery ----------------------------------------------------------------------------

    def read(self, inv: Inventory) -> tuple[dict[str, GpuMig], dict[str, dict[int, str]]]:
        """The MIG GPUs of ``inv`` (by device name) and their MIG device UUIDs."""
        gpus = [d for d in inv.devices if d.type is DeviceType.GPU and d.vendor.lower() == "nvidia"]
        if not gpus:
            return {}, {}
        nvml = self._nvml()
        if nvml is None:
            return {}, {}
        handles = _handles(nvml)
        out, uuids = {}, {}
        for dev in gpus:
            h = handles.get(_bus(dev.pci.bus_id)) if dev.pci else None
            if h is None:
                continue
            try:
                mig = read_gpu(nvml, h, dev.pci.bus_id if dev.pci else "")
            except pynvml.NVMLError as exc:
                log.warning("MIG state of %s unreadable: %s", dev.name, exc)
                continue
            if mig is not None and mig.profiles:
                out[dev.name] = mig
                uuids[dev.name] = _mig_uuids(nvml, h)
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
                handle = _handles(nvml).get(_bus(part.gpu_bus_id))
                if handle is None:
                    raise MigError(f"GPU {part.gpu_bus_id} not found by NVML")
                if rec.gi is None:
                    placement = pynvml.c_nvmlGpuInstancePlacement_t()
                    placement.start, placement.size = part.start, part.size
                    gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
                        handle, part.profile_id, placement
                    )
                    rec.gi = int(nvml.nvmlGpuInstanceGetInfo(gi).id)
                gi = nvml.nvmlDeviceGetGpuInstanceById(handle, rec.gi)
                if rec.ci is None:
                    ci = nvml.nvmlGpuInstanceCreateComputeInstance(gi, _CI_PROFILES[part.slices])
                    rec.ci = int(nvml.nvmlComputeInstanceGetInfo(ci).id)
                uuid = _mig_uuids(nvml, handle).get(rec.gi, "")
                if not uuid:
                    raise MigError(f"no MIG device for GPU instance {rec.gi}")
                rec.uuid = uuid
                # Ids and UUID only spare a search: the durable intent is what recovery needs
                # (an instance at the recorded placement and profile is the claim's).
                self._save(durable=False)
                return self._nodes(part.gpu_minor, rec.gi, rec.ci), uuid
            except pynvml.NVMLError as exc:
                raise MigError(
                    f"creating MIG {part.profile} at memory slice {part.start} on GPU "
                    f"{part.gpu_bus_id} failed: {exc}"
                ) from None

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
            handles = _handles(nvml)
            # Placements other claims hold now: never destroyed for a stale record.
            held = {(r.gpu_uuid, r.start, r.profile_id) for r in self.records if r not in mine}
            try:
                for rec in mine:
                    if (rec.gpu_uuid, rec.start, rec.profile_id) not in held:
                        self._destroy(nvml, handles.get(_bus(rec.gpu_bus_id)), rec)
                    self.records.remove(rec)
            finally:
                self._save()

    def _find(self, nvml: Any, handle: Any, rec: Record) -> Any | None:
        """The GPU instance of ``rec``; by placement when the agent died before it learnt the
        id (the placement was allocated to this claim: an instance there is its one)."""
        try:
            if rec.gi is not None:
                return nvml.nvmlDeviceGetGpuInstanceById(handle, rec.gi)
            for gi in _listed(
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
            for ci in _listed(
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

    def reconcile(self, prepared: Collection[str]) -> list[str]:
        """Destroy the instances of claims not in ``prepared``; their claim UIDs."""
        with self.lock:
            stale = sorted({r.claim for r in self.records if r.claim not in prepared})
        if stale:
            self.release(stale)
            log.info("destroyed MIG instances of claims not prepared: %s", stale)
        return stale
