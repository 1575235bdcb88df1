"""What a container gets for a set of device IDs, and which IDs the plugin prefers.

Pure functions over the model, so the gRPC layer stays thin and the rules are easy to test.
Device IDs are PCI addresses; with sharing, ``<bdf>::<replica>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubeacc.model import Device, DeviceType

if TYPE_CHECKING:  # the topology loads at the first GetPreferredAllocation, not at start
    from kubeacc.topology.graph import TopologyGraph

REPLICA_SEP = "::"
UNITS_ENV = "ACCELERATOR_UNITS"
#: An error names at most this many IDs (then a count), each cut to ID_CHARS: the kubelet's
#: gRPC client refuses a status message over a few KB, so a hostile request of 10,000 IDs
#: must still get an answer it can read.
LISTED_IDS = 5
ID_CHARS = 64


class AllocationError(ValueError):
    """The request can't be honoured; nothing is handed out."""


def device_id(bdf: str, replica: int | None) -> str:
    return bdf if replica is None else f"{bdf}{REPLICA_SEP}{replica}"


def physical(dev_id: str) -> str:
    return dev_id.split(REPLICA_SEP, 1)[0]


def listed(ids: Sequence[str]) -> str:
    """``a, b, c (and 9997 more)``: the first few IDs, shortened and quoted when odd."""

    def show(i: str) -> str:
        short = i if len(i) <= ID_CHARS else i[:ID_CHARS] + "..."
        return short if short.isprintable() and short and " " not in short else repr(short)

    head = ", ".join(show(i) for i in ids[:LISTED_IDS])
    more = len(ids) - LISTED_IDS
    return f"{head} (and {more} more)" if more > 0 else head


def check_known(devices: Mapping[str, object], ids: Sequence[str]) -> None:
    """AllocationError naming the IDs whose device is not advertised."""
    unknown = [i for i in dict.fromkeys(ids) if physical(i) not in devices]
    if unknown:
        raise AllocationError(f"unknown device(s): {listed(unknown)}")


#: What NVIDIA's container images read to pick their GPUs.
NVIDIA_VISIBLE = "NVIDIA_VISIBLE_DEVICES"


@dataclass
class ContainerDevices:
    envs: dict[str, str] = field(default_factory=dict)
    device_nodes: list[str] = field(default_factory=list)
    cdi_devices: list[str] = field(default_factory=list)
    #: Read-only bind mounts, ``(host path, container path)`` (the share-limit library).
    read_only_mounts: list[tuple[str, str]] = field(default_factory=list)


def allocate(
    devices: Mapping[str, Device], ids: Sequence[str], cdi_kind: str | None = None
) -> ContainerDevices:
    """Device nodes, env and CDI names for one container; raises AllocationError as a whole."""
    if not ids:
        raise AllocationError("no devices requested")
    check_known(devices, ids)
    bdfs = list(dict.fromkeys(physical(i) for i in ids))
    chosen = [devices[b] for b in bdfs]
    sick = [d.name for d in chosen if not d.health.healthy]
    if sick:
        raise AllocationError(f"unhealthy device(s): {listed(sick)}")
    out = ContainerDevices()
    out.envs[UNITS_ENV] = ",".join(bdfs)
    out.envs["ACCELERATOR_TYPE"] = chosen[0].type.value
    out.envs.update(_type_env(chosen))
    out.device_nodes = list(dict.fromkeys(n for d in chosen for n in d.device_nodes))
    if cdi_kind is not None:
        out.cdi_devices = [f"{cdi_kind}={d.name}" for d in chosen]
    return out


def _type_env(chosen: Sequence[Device]) -> dict[str, str]:
    """The variables each vendor's runtime reads to pick its devices."""
    first = chosen[0]
    if first.type is DeviceType.GPU and first.vendor == "NVIDIA":
        return {
            NVIDIA_VISIBLE: ",".join(d.uuid or str(d.index) for d in chosen),
        }
    if first.type is DeviceType.GPU and first.vendor == "AMD":
        return {"ROCR_VISIBLE_DEVICES": ",".join(str(d.index) for d in chosen)}
    if first.type is DeviceType.XPU:
        return {"XPU_VISIBLE_DEVICES": ",".join(str(d.index) for d in chosen)}
    if first.type is DeviceType.FPGA:
        ports = [p for d in chosen if d.fpga for p in d.fpga.ports]
        return {"FPGA_PORTS": ",".join(ports)} if ports else {}
    if first.type is DeviceType.NIC:
        nets = [n for d in chosen for n in d.netdevs]
        return {"ACCELERATOR_NETDEVS": ",".join(nets)} if nets else {}
    return {}


def prefer(
    graph: TopologyGraph,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    strategy: str = "spread",
) -> list[str]:
    """GetPreferredAllocation for one container.

    Without sharing: the topology-best set (fewest NUMA nodes, then shared switch/root, then
    links). With sharing, IDs are replicas: ``spread`` picks replicas of as many different,
    least-used devices as possible; ``packed`` fills the most-used devices first. The
    physical devices are chosen by topology either way.
    """
    from kubeacc.topology.bestset import preferred_allocation

    if size <= 0:
        return []
    if not any(REPLICA_SEP in i for i in [*available, *must_include]):
        return preferred_allocation(graph, available, must_include, size)
    free: dict[str, list[str]] = {}
    for dev_id in dict.fromkeys([*must_include, *available]):
        free.setdefault(physical(dev_id), []).append(dev_id)
    picked = list(dict.fromkeys(must_include))
    for dev_id in picked:
        free[physical(dev_id)].remove(dev_id)
    need = size - len(picked)
    if need <= 0:
        return picked[:size]
    if strategy == "packed":
        order = sorted(free, key=lambda b: (len(free[b]), b))
        for bdf in order:
            take = free[bdf][:need]
            picked += take
            need -= len(take)
            if need == 0:
                break
        return picked
    physical_must = list(dict.fromkeys(physical(i) for i in picked))
    candidates = [b for b in free if free[b]]
    width = min(len(candidates), need + len(physical_must))
    best = preferred_allocation(graph, candidates, physical_must, width)
    order = sorted(best, key=lambda b: -len(free[b]))
    while need > 0 and any(free[b] for b in order):
        for bdf in order:
            if need and free[bdf]:
                picked.append(free[bdf].pop(0))
                need -= 1
    return picked
