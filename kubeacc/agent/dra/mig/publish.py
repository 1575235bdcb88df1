"""MIG GPUs as partitionable devices (KEP-4815): how they are published.

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
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.mig.model import (
    COMPUTE_COUNTER,
    COMPUTE_SLICES,
    MEMORY_SLICES,
    MIB,
    GpuMig,
    Partition,
    Profile,
    counter_set,
    partition_name,
)
from kubeacc.agent.dra.sharing.policyshare import MigFilter
from kubeacc.contracts.names import (
    MIG_COMPUTE_SLICES_ATTR,
    MIG_ENABLED_ATTR,
    MIG_PARENT_BUS_ATTR,
    MIG_PARENT_UUID_ATTR,
    MIG_PROFILE_ATTR,
    MIG_START_ATTR,
)
from kubeacc.model import Device, DeviceType, Inventory


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


_GPU_NODE = re.compile(r"^/dev/nvidia[0-9]+$")


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
            # the driver's control and UVM nodes; the instance's own come at prepare
            device_nodes=tuple(n for n in gpu.device_nodes if not _GPU_NODE.match(n)),
            healthy=gpu.health.state,
            message=gpu.health.reason,
            vendor=gpu.vendor,
            memory_bytes=part.memory_mib * MIB,
            mig=part,
        )
    return out
