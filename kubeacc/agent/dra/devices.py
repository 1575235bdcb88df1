"""Inventory devices as ``resource.k8s.io/v1`` slice devices (plain dicts, API field names).

One entry per accelerator plus one per enabled SR-IOV virtual function. Attribute names without
a domain are qualified by the driver name (``type`` is ``kubeacc.io/type`` in CEL); the standard
attributes (``resource.kubernetes.io/pcieRoot``, ``pciBusID`` and ``numaNode``) carry their own
domain. GPUs chosen by ``--memory-shared`` selectors are
published as memory-shared (:mod:`kubeacc.agent.dra.sharing.limits`).

A whole device carries at most :data:`SMALL_DOMAIN` attributes in the driver's domain (a GPU:
``type vendor model index numaNode uuid units driverVersion``). kube-scheduler evaluates a
class selector by first copying the evaluated device's attributes into one Go map per domain
(``k8s.io/dynamic-resource-allocation/cel``, ``DeviceMatches``), on every node it filters for
every pod; a Go map of up to 8 entries is one small group, a 9th entry grows it into a hashed
table, a dearer copy (docs/benchmarks.md, ``scheduler_allocator``). So nothing is published
twice: ``productName``, which repeated ``model`` on every whole device, is gone (MIG partitions
keep theirs: it names the profile).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubeacc.agent.dra.mig.model import Partition
from kubeacc.agent.dra.sharing.limits import Selector, is_memory_shared, shared_capacity
from kubeacc.model import Device, HealthState, Inventory, PartitionKind
from kubeacc.node.sharelimit import SHARE_ENFORCEMENT_ATTR, Limiter
from kubeacc.units.table import active_table

#: Taint key put on devices that discovery reports as not healthy.
UNHEALTHY_TAINT = "kubeacc.io/unhealthy"
PCIE_ROOT_ATTR = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID_ATTR = "resource.kubernetes.io/pciBusID"
#: The standard NUMA attribute (an int; Kubernetes 1.37 defines it in k8s.io/dynamic-resource-
#: allocation's deviceattribute): published only where the NUMA node is known, since a device
#: without affinity would otherwise match every other such device under ``matchAttribute``.
NUMA_NODE_ATTR = "resource.kubernetes.io/numaNode"
#: Linux's highest possible NUMA node number is 1023 (MAX_NUMNODES with CONFIG_NODES_SHIFT 10).
MAX_NUMA_NODE = 1023
#: Attributes in the driver's domain that a whole device stays within (see the module's text);
#: a memory-shared GPU (``shareEnforcement``) and a MIG-mode GPU (``migEnabled``) have one more.
SMALL_DOMAIN = 8
#: The DRA API caps string attribute values at 64 characters.
_MAX_STRING = 64


def _s(value: str) -> dict[str, str]:
    return {"string": value[:_MAX_STRING]}


def _int(value: int) -> dict[str, int]:
    return {"int": value}


def _common(dev: Device) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "type": _s(dev.type.value),
        "vendor": _s(dev.vendor),
        "model": _s(dev.model),
        "index": _int(dev.index),
        "numaNode": _int(dev.numa_node),
    }
    if dev.pcie_root:
        attrs[PCIE_ROOT_ATTR] = _s(dev.pcie_root)
    if 0 <= dev.numa_node <= MAX_NUMA_NODE:
        attrs[NUMA_NODE_ATTR] = _int(dev.numa_node)
    return attrs


def _taints(state: HealthState, reason: str) -> list[dict[str, str]]:
    if state is HealthState.HEALTHY:
        return []
    value = "unknown" if state is HealthState.UNKNOWN else "unhealthy"
    taint = {"key": UNHEALTHY_TAINT, "value": value, "effect": "NoSchedule"}
    return [taint]


def device_entry(
    dev: Device, shared: bool = False, limiter: Limiter | None = None
) -> dict[str, Any]:
    """The slice entry of one physical device; ``shared``: as a memory-shared GPU, with the
    attribute ``shareEnforcement`` saying what holds its shares to their limits here
    (``library`` or ``advisory``; a class with MPS makes it ``mps`` at prepare)."""
    attrs = _common(dev)
    if dev.pci:
        attrs[PCI_BUS_ID_ATTR] = _s(dev.pci.bus_id)
    if dev.uuid:
        attrs["uuid"] = _s(dev.uuid)
    units = active_table().units_for(dev.model)  # normalized units (kubeacc.units)
    if units:
        attrs["units"] = _int(units)
    if dev.driver_version:
        attrs["driverVersion"] = _s(dev.driver_version)
    if dev.fpga is not None:
        if dev.fpga.interface_id:
            attrs["interfaceId"] = _s(dev.fpga.interface_id)
        if dev.fpga.afu_id:
            attrs["afuId"] = _s(dev.fpga.afu_id)
    if dev.sriov is not None:
        attrs["sriovNumVFs"] = _int(dev.sriov.num_vfs)
    entry: dict[str, Any] = {"name": dev.name, "attributes": attrs}
    if shared and dev.memory_bytes:
        how = (limiter or Limiter()).enforcement(dev.vendor, mps=False)
        attrs[SHARE_ENFORCEMENT_ATTR] = _s(how.value)
        entry["allowMultipleAllocations"] = True
        entry["capacity"] = shared_capacity(dev.memory_bytes)
    elif dev.memory_bytes:
        entry["capacity"] = {"kubeacc.io/memory": {"value": str(dev.memory_bytes)}}
    taints = _taints(dev.health.state, dev.health.reason)
    if taints:
        entry["taints"] = taints
    return entry


def vf_name(pf: Device, vf_index: int) -> str:
    """Slice name of a virtual function: ``<pf-name>-vf<N>`` (still a DNS label)."""
    return f"{pf.name}-vf{vf_index}"


def vf_entries(pf: Device) -> list[dict[str, Any]]:
    """One slice entry per enabled SR-IOV virtual function of ``pf``."""
    out = []
    for part in pf.partitions:
        if part.kind is not PartitionKind.SRIOV_VF:
            continue
        attrs = _common(pf)
        attrs["physicalFunction"] = _s(pf.name)
        attrs["virtualFunction"] = _int(part.index)
        attrs["sriovVF"] = {"bool": True}
        if part.bus_id:
            attrs[PCI_BUS_ID_ATTR] = _s(part.bus_id)
        if part.driver:
            attrs["vfDriver"] = _s(part.driver)
        entry: dict[str, Any] = {"name": vf_name(pf, part.index), "attributes": attrs}
        taints = _taints(pf.health.state, pf.health.reason)
        if taints:
            entry["taints"] = taints
        out.append(entry)
    return out


def slice_devices(
    inv: Inventory,
    shared: Sequence[Selector] = (),
    limiter: Limiter | None = None,
    *,
    vfs: bool = True,
) -> list[dict[str, Any]]:
    """Every device of the node as slice entries, sorted by name (stable slice contents);
    GPUs that ``shared`` selects as memory-shared ones (enforced by ``limiter``); SR-IOV
    virtual functions only with ``vfs`` (:mod:`kubeacc.agent.dra.publishing`)."""
    out: list[dict[str, Any]] = []
    for dev in inv.devices:
        out.append(device_entry(dev, is_memory_shared(dev, shared), limiter))
        if vfs:
            out.extend(vf_entries(dev))
    out.sort(key=lambda d: str(d["name"]))
    return out


def device_index(inv: Inventory, *, vfs: bool = True) -> dict[str, DeviceInfo]:
    """What the kubelet plugin needs to know about each published device, by slice name
    (SR-IOV virtual functions only with ``vfs``, as :func:`slice_devices`)."""
    out: dict[str, DeviceInfo] = {}
    for dev in inv.devices:
        bdf = dev.pci.bus_id if dev.pci else ""
        out[dev.name] = DeviceInfo(
            name=dev.name,
            type=dev.type.value,
            bus_id=bdf,
            device_nodes=tuple(dev.device_nodes),
            healthy=dev.health.state,
            message=dev.health.reason,
            vendor=dev.vendor,
            memory_bytes=dev.memory_bytes or 0,
            uuid=dev.uuid or "",
            netdev=dev.netdevs[0] if dev.netdevs else "",
        )
        for part in dev.partitions:
            if vfs and part.kind is PartitionKind.SRIOV_VF:
                name = vf_name(dev, part.index)
                out[name] = DeviceInfo(
                    name=name,
                    type=dev.type.value,
                    bus_id=part.bus_id or "",
                    device_nodes=(),
                    healthy=dev.health.state,
                    message=dev.health.reason,
                    netdev=part.netdev or "",
                    vf=True,
                )
    return out


@dataclass(frozen=True)
class DeviceInfo:
    """A published device as the plugin sees it: PCI address, device nodes, health."""

    name: str
    type: str
    bus_id: str
    device_nodes: tuple[str, ...]
    healthy: HealthState
    message: str
    vendor: str = ""
    memory_bytes: int = 0
    #: A MIG partition (:mod:`kubeacc.agent.dra.mig.prepare`): its instance is made on prepare.
    mig: Partition | None = None
    #: The GPU's UUID (NVIDIA: what NVIDIA_VISIBLE_DEVICES names).
    uuid: str = ""
    #: A NIC's (or VF's) network interface on the host, when it has one.
    netdev: str = ""
    #: An SR-IOV virtual function (handed to a pod whose network plugin addresses it).
    vf: bool = False

    @property
    def nvidia_gpu(self) -> bool:
        """An NVIDIA GPU or a partition of one: its container needs the driver user space."""
        return self.type == "gpu" and self.vendor.lower() == "nvidia"
