"""The one accelerator model shared by every component.

Pure data: nothing here touches the host. Discovery backends build these objects; the node
agent turns them into ResourceSlices, device-plugin lists and ``Accelerator`` status; the
allocation engine reads their topology. JSON field names are camelCase (the Kubernetes
convention) and the document carries ``schemaVersion`` so readers can tell which shape they got.

The classes are msgspec Structs, not pydantic models: every node daemon builds them, and
pydantic's schema machinery alone costs a node daemon several MB and tens of milliseconds of
start (docs/dependencies.md). msgspec validates only when it decodes or converts, so each
class checks its own constraints in ``__post_init__`` as well, which runs on construction,
on ``replace`` and on decoding alike. ``from_json_dict`` / ``to_json_dict`` are the only
ways in and out of JSON; every invalid input raises ``ModelError`` with the offending field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self, TypeVar

import msgspec

SCHEMA_VERSION = "kubeacc.io/v1alpha1"

_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_PCIE_ROOT_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

#: Keys a device's JSON carries on output that are computed from other fields; accepted (and
#: dropped) on input so that our own JSON reads back.
DERIVED_KEYS = ("pciBusID", "virtualFunctions")

_E = TypeVar("_E", bound=StrEnum)


class ModelError(ValueError):
    """A value the model does not accept; the message names the field."""


def _doc(text: str, **constraints: Any) -> msgspec.Meta:
    return msgspec.Meta(description=text, **constraints)


def _enum(kind: type[_E], field: str, value: object) -> _E:
    """The member of ``kind`` for ``value`` (a member or its string), or a clear error."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str) and value in kind._value2member_map_:
        return kind(value)
    allowed = ", ".join(repr(m.value) for m in kind)
    raise ModelError(f"{field}: {value!r} is not one of {allowed}")


def _at_least(field: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise ModelError(f"{field}: {value} is not >= {low}")


class _Model(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Shared configuration: camelCase JSON keys, unknown keys rejected, keyword construction."""

    @classmethod
    def _accept(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """Input as read, before conversion (a hook for keys that are accepted and dropped)."""
        return data

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> Self:
        """Validate decoded JSON (camelCase keys) into an object; ``ModelError`` if invalid."""
        if not isinstance(data, Mapping):
            raise ModelError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        try:
            return msgspec.convert(cls._accept(data), cls)
        except msgspec.ValidationError as err:
            raise ModelError(f"{cls.__name__}: {err}") from None

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form: camelCase keys, ``None`` values left out."""
        out = _without_none(msgspec.to_builtins(self))
        assert isinstance(out, dict)
        return out

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied, validated like a new object."""
        return msgspec.structs.replace(self, **changes)


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


class DeviceType(StrEnum):
    GPU = "gpu"
    FPGA = "fpga"
    NIC = "nic"
    XPU = "xpu"
    ACCELERATOR = "accelerator"


class HealthState(StrEnum):
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


class Health(_Model):
    state: HealthState = HealthState.HEALTHY
    reason: str = ""

    def __post_init__(self) -> None:
        self.state = _enum(HealthState, "state", self.state)

    @property
    def healthy(self) -> bool:
        return self.state is HealthState.HEALTHY


def is_bdf(value: str) -> bool:
    """True for a full PCI address in the kernel's form, ``dddd:bb:dd.f`` (lower-case hex)."""
    return bool(_BDF_RE.match(value))


class PCIIdentity(_Model):
    """What the PCI configuration space and the kernel say about a function."""

    bus_id: Annotated[str, _doc("Full PCI address, dddd:bb:dd.f")] = msgspec.field(name="busID")
    vendor_id: Annotated[str, _doc("0x-prefixed 4-digit hex")]
    device_id: str
    class_id: Annotated[str, _doc("0x-prefixed 6-digit class code")]
    subsystem_vendor_id: str | None = None
    subsystem_device_id: str | None = None
    revision: str | None = None
    driver: Annotated[str | None, _doc("Bound kernel driver, if any")] = None
    iommu_group: int | None = None

    def __post_init__(self) -> None:
        value = self.bus_id.lower()
        if not is_bdf(value):
            raise ModelError(f"busID: not a PCI address (dddd:bb:dd.f): {value!r}")
        self.bus_id = value


class LinkKind(StrEnum):
    NVLINK = "nvlink"
    XGMI = "xgmi"
    XPU_LINK = "xpulink"
    OTHER = "other"


class Link(_Model):
    """A direct device-to-device interconnect (NVLink-style), as seen from this device."""

    peer: Annotated[str, _doc("PCI address of the device at the other end")]
    kind: LinkKind = LinkKind.NVLINK
    count: Annotated[int, _doc("Parallel links (lanes) to that peer", ge=1)] = 1

    def __post_init__(self) -> None:
        self.kind = _enum(LinkKind, "kind", self.kind)
        _at_least("count", self.count, 1)


class PartitionKind(StrEnum):
    SRIOV_VF = "sriov-vf"
    MIG = "mig"


class Partition(_Model):
    """A slice of the device that can be handed out on its own: an SR-IOV VF or a MIG instance."""

    kind: PartitionKind
    index: int
    name: str
    bus_id: Annotated[str | None, _doc("PCI address (VFs)")] = msgspec.field(
        default=None, name="busID"
    )
    driver: str | None = None
    netdev: str | None = None
    uuid: str | None = None
    profile: Annotated[str | None, _doc("MIG profile, e.g. 1g.10gb")] = None
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        self.kind = _enum(PartitionKind, "kind", self.kind)


class SRIOV(_Model):
    total_vfs: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(name="totalVFs")
    num_vfs: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(name="numVFs")

    def __post_init__(self) -> None:
        _at_least("totalVFs", self.total_vfs, 0)
        _at_least("numVFs", self.num_vfs, 0)


class FPGADriver(StrEnum):
    DFL = "dfl"
    OPAE = "opae"
    XILINX = "xilinx"
    AWS = "aws"


class FPGAState(_Model):
    """What an FPGA is and what is loaded on it."""

    driver: FPGADriver
    interface_id: Annotated[
        str | None, _doc("Static region (FIM/shell) id: DFL compat_id / OPAE interface_id")
    ] = None
    afu_id: Annotated[str | None, _doc("Accelerator function loaded now")] = None
    region: Annotated[str | None, _doc("fpga_region / fpga device name")] = None
    ports: Annotated[list[str], _doc("Port devices, e.g. dfl-port.0")] = msgspec.field(
        default_factory=list
    )

    def __post_init__(self) -> None:
        self.driver = _enum(FPGADriver, "driver", self.driver)


class Device(_Model):
    """One accelerator on one node."""

    name: Annotated[str, _doc("Stable, DNS-label-safe: <type>-<domain>-<bus>-<dev>-<fn>")]
    type: DeviceType
    vendor: str
    model: str
    index: Annotated[int, _doc("Position among the node's devices of this type", ge=0)]
    source: Annotated[str, _doc("Discovery backend that found it")]
    pci: PCIIdentity | None = None
    numa_node: Annotated[int, _doc("-1: the platform reports none", ge=-1)] = -1
    pcie_root: Annotated[str | None, _doc("pci<domain>:<bus>")] = None
    pcie_path: Annotated[list[str], _doc("Bridges from the root port down to the device")] = (
        msgspec.field(default_factory=list)
    )
    local_cpus: Annotated[str | None, _doc("cpulist format, e.g. 0-23,48-71")] = None
    memory_bytes: Annotated[int, msgspec.Meta(ge=0)] | None = None
    uuid: str | None = None
    serial: str | None = None
    driver_version: str | None = None
    device_nodes: list[str] = msgspec.field(default_factory=list)
    netdevs: list[str] = msgspec.field(default_factory=list)
    rdma_devices: list[str] = msgspec.field(default_factory=list)
    health: Health = msgspec.field(default_factory=Health)
    links: list[Link] = msgspec.field(default_factory=list)
    sriov: SRIOV | None = None
    partitions: list[Partition] = msgspec.field(default_factory=list)
    fpga: FPGAState | None = None
    attributes: Annotated[
        dict[str, str], _doc("Backend-specific facts shown but not interpreted")
    ] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _DNS_LABEL_RE.match(self.name):
            raise ModelError(f"name: device name must be a DNS label: {self.name!r}")
        if self.pcie_root is not None and not _PCIE_ROOT_RE.match(self.pcie_root):
            raise ModelError(f"pcieRoot: PCIe root must look like pci0000:00: {self.pcie_root!r}")
        self.type = _enum(DeviceType, "type", self.type)
        _at_least("index", self.index, 0)
        _at_least("numaNode", self.numa_node, -1)
        _at_least("memoryBytes", self.memory_bytes, 0)

    @classmethod
    def _accept(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """Accept our own JSON back: the derived keys are recomputed, not stored."""
        if any(k in data for k in DERIVED_KEYS):
            return {k: v for k, v in data.items() if k not in DERIVED_KEYS}
        return data

    @property
    def pci_bus_id(self) -> str | None:
        """The device's PCI address, at the top level as consumers expect it."""
        return self.pci.bus_id if self.pci else None

    @property
    def virtual_functions(self) -> list[str]:
        """PCI addresses of the SR-IOV virtual functions that are enabled now."""
        return [p.bus_id for p in self.partitions if p.kind is PartitionKind.SRIOV_VF and p.bus_id]

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON form, with the derived keys ``pciBusID`` and ``virtualFunctions``."""
        return _with_derived(self, super().to_json_dict())


def _with_derived(dev: Device, out: dict[str, Any]) -> dict[str, Any]:
    if dev.pci is not None:
        out["pciBusID"] = dev.pci.bus_id
    out["virtualFunctions"] = dev.virtual_functions
    return out


def device_name(dtype: DeviceType, bdf: str) -> str:
    """The stable name of a PCI device: type plus address, which survives reboots."""
    return f"{dtype.value}-" + re.sub(r"[:.]", "-", bdf.lower())


class NUMANode(_Model):
    id: Annotated[int, msgspec.Meta(ge=0)]
    cpus: str = ""
    distances: Annotated[list[int], _doc("SLIT distances to node 0..n-1, as in sysfs")] = (
        msgspec.field(default_factory=list)
    )

    def __post_init__(self) -> None:
        _at_least("id", self.id, 0)


class DiscoveryWarning(_Model):
    """Something that could not be read; names the device (if any) and the path."""

    path: str
    message: str
    device: str | None = None

    def __str__(self) -> str:
        who = f"{self.device}: " if self.device else ""
        return f"{who}{self.path}: {self.message}"


class Inventory(_Model):
    """Everything discovery found on one host."""

    schema_version: str = SCHEMA_VERSION
    hostname: str | None = None
    devices: list[Device] = msgspec.field(default_factory=list)
    numa_nodes: list[NUMANode] = msgspec.field(default_factory=list)
    warnings: list[DiscoveryWarning] = msgspec.field(default_factory=list)

    @classmethod
    def _accept(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        devices = data.get("devices")
        if isinstance(devices, list):
            fixed = [Device._accept(d) if isinstance(d, Mapping) else d for d in devices]
            return {**data, "devices": fixed}
        return data

    def by_type(self, dtype: DeviceType) -> list[Device]:
        return [d for d in self.devices if d.type is dtype]

    def by_bdf(self) -> dict[str, Device]:
        return {d.pci.bus_id: d for d in self.devices if d.pci}

    def to_json_dict(self) -> dict[str, Any]:
        out = super().to_json_dict()
        pairs = zip(self.devices, out["devices"], strict=True)
        out["devices"] = [_with_derived(d, o) for d, o in pairs]
        return out
