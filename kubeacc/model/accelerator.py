"""The one accelerator model shared by every component.

Pure data: nothing here touches the host. Discovery backends build these objects; the node
agent turns them into ResourceSlices, device-plugin lists and ``Accelerator`` status; the
allocation engine reads their topology. JSON field names are camelCase (the Kubernetes
convention) and the document carries ``schemaVersion`` so readers can tell which shape they got.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

SCHEMA_VERSION = "kubeacc.io/v1alpha1"

_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_PCIE_ROOT_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
    )


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

    @property
    def healthy(self) -> bool:
        return self.state is HealthState.HEALTHY


def is_bdf(value: str) -> bool:
    """True for a full PCI address in the kernel's form, ``dddd:bb:dd.f`` (lower-case hex)."""
    return bool(_BDF_RE.match(value))


class PCIIdentity(_Model):
    """What the PCI configuration space and the kernel say about a function."""

    bus_id: str = Field(alias="busID", description="Full PCI address, dddd:bb:dd.f")
    vendor_id: str = Field(description="0x-prefixed 4-digit hex")
    device_id: str
    class_id: str = Field(description="0x-prefixed 6-digit class code")
    subsystem_vendor_id: str | None = None
    subsystem_device_id: str | None = None
    revision: str | None = None
    driver: str | None = Field(default=None, description="Bound kernel driver, if any")
    iommu_group: int | None = None

    @field_validator("bus_id")
    @classmethod
    def _check_bdf(cls, value: str) -> str:
        value = value.lower()
        if not is_bdf(value):
            raise ValueError(f"not a PCI address (dddd:bb:dd.f): {value!r}")
        return value


class LinkKind(StrEnum):
    NVLINK = "nvlink"
    XGMI = "xgmi"
    XPU_LINK = "xpulink"
    OTHER = "other"


class Link(_Model):
    """A direct device-to-device interconnect (NVLink-style), as seen from this device."""

    peer: str = Field(description="PCI address of the device at the other end")
    kind: LinkKind = LinkKind.NVLINK
    count: int = Field(default=1, ge=1, description="Parallel links (lanes) to that peer")


class PartitionKind(StrEnum):
    SRIOV_VF = "sriov-vf"
    MIG = "mig"


class Partition(_Model):
    """A slice of the device that can be handed out on its own: an SR-IOV VF or a MIG instance."""

    kind: PartitionKind
    index: int
    name: str
    bus_id: str | None = Field(default=None, alias="busID", description="PCI address (VFs)")
    driver: str | None = None
    netdev: str | None = None
    uuid: str | None = None
    profile: str | None = Field(default=None, description="MIG profile, e.g. 1g.10gb")
    memory_bytes: int | None = None


class SRIOV(_Model):
    total_vfs: int = Field(ge=0, alias="totalVFs")
    num_vfs: int = Field(ge=0, alias="numVFs")


class FPGADriver(StrEnum):
    DFL = "dfl"
    OPAE = "opae"
    XILINX = "xilinx"
    AWS = "aws"


class FPGAState(_Model):
    """What an FPGA is and what is loaded on it."""

    driver: FPGADriver
    interface_id: str | None = Field(
        default=None, description="Static region (FIM/shell) id: DFL compat_id / OPAE interface_id"
    )
    afu_id: str | None = Field(default=None, description="Accelerator function loaded now")
    region: str | None = Field(default=None, description="fpga_region / fpga device name")
    ports: list[str] = Field(default_factory=list, description="Port devices, e.g. dfl-port.0")


class Device(_Model):
    """One accelerator on one node."""

    name: str = Field(description="Stable, DNS-label-safe: <type>-<domain>-<bus>-<dev>-<fn>")
    type: DeviceType
    vendor: str
    model: str
    index: int = Field(ge=0, description="Position among the node's devices of this type")
    source: str = Field(description="Discovery backend that found it")
    pci: PCIIdentity | None = None
    numa_node: int = Field(default=-1, ge=-1, description="-1: the platform reports none")
    pcie_root: str | None = Field(default=None, description="pci<domain>:<bus>")
    pcie_path: list[str] = Field(
        default_factory=list, description="Bridges from the root port down to the device"
    )
    local_cpus: str | None = Field(default=None, description="cpulist format, e.g. 0-23,48-71")
    memory_bytes: int | None = Field(default=None, ge=0)
    uuid: str | None = None
    serial: str | None = None
    driver_version: str | None = None
    device_nodes: list[str] = Field(default_factory=list)
    netdevs: list[str] = Field(default_factory=list)
    rdma_devices: list[str] = Field(default_factory=list)
    health: Health = Field(default_factory=Health)
    links: list[Link] = Field(default_factory=list)
    sriov: SRIOV | None = None
    partitions: list[Partition] = Field(default_factory=list)
    fpga: FPGAState | None = None
    attributes: dict[str, str] = Field(
        default_factory=dict, description="Backend-specific facts shown but not interpreted"
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        """Accept our own JSON back: the derived keys are recomputed, not stored."""
        if isinstance(data, dict) and ("pciBusID" in data or "virtualFunctions" in data):
            data = {k: v for k, v in data.items() if k not in ("pciBusID", "virtualFunctions")}
        return data

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _DNS_LABEL_RE.match(value):
            raise ValueError(f"device name must be a DNS label: {value!r}")
        return value

    @field_validator("pcie_root")
    @classmethod
    def _check_root(cls, value: str | None) -> str | None:
        if value is not None and not _PCIE_ROOT_RE.match(value):
            raise ValueError(f"PCIe root must look like pci0000:00: {value!r}")
        return value

    @computed_field(alias="pciBusID")  # type: ignore[prop-decorator]
    @property
    def pci_bus_id(self) -> str | None:
        """The device's PCI address, at the top level as consumers expect it."""
        return self.pci.bus_id if self.pci else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def virtual_functions(self) -> list[str]:
        """PCI addresses of the SR-IOV virtual functions that are enabled now."""
        return [p.bus_id for p in self.partitions if p.kind is PartitionKind.SRIOV_VF and p.bus_id]


def device_name(dtype: DeviceType, bdf: str) -> str:
    """The stable name of a PCI device: type plus address, which survives reboots."""
    return f"{dtype.value}-" + re.sub(r"[:.]", "-", bdf.lower())


class NUMANode(_Model):
    id: int = Field(ge=0)
    cpus: str = ""
    distances: list[int] = Field(
        default_factory=list, description="SLIT distances to node 0..n-1, as in sysfs"
    )


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
    devices: list[Device] = Field(default_factory=list)
    numa_nodes: list[NUMANode] = Field(default_factory=list)
    warnings: list[DiscoveryWarning] = Field(default_factory=list)

    def by_type(self, dtype: DeviceType) -> list[Device]:
        return [d for d in self.devices if d.type is dtype]

    def by_bdf(self) -> dict[str, Device]:
        return {d.pci.bus_id: d for d in self.devices if d.pci}

    def to_json_dict(self) -> dict[str, object]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
