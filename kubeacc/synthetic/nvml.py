"""The NVML description of a synthetic host: ``/.synthetic/nvml.json``.

Tests replace the NVML library only at its call boundary; the stand-in answers from this
document. Keys are NVML's concepts in camelCase; bus ids use NVML's own form
(``00000000:3D:00.0``: 8-digit domain, upper-case hex).

NVLink modelling: on NVSwitch machines real NVML reports the switch as each link's remote end.
The description instead names the *peer GPU* a link leads to, so topology code sees which GPUs
talk over NVLink and with how many links (the DGX profile spreads 18 links over 7 peers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubeacc.synthetic.fsw import TreeWriter

NVML_JSON = "/.synthetic/nvml.json"


@dataclass(frozen=True)
class MigDevice:
    index: int
    uuid: str  # "MIG-..."
    profile: str  # "1g.10gb"
    memory_total: int
    gpu_instance_id: int = 0
    compute_instance_id: int = 0
    #: (start, size) in memory slices, as nvmlGpuInstanceGetInfo reports it.
    placement: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "profile": self.profile,
            "memoryTotal": self.memory_total,
            "gpuInstanceId": self.gpu_instance_id,
            "computeInstanceId": self.compute_instance_id,
        }
        if self.placement is not None:
            out["placement"] = list(self.placement)
        return out


@dataclass(frozen=True)
class NvLink:
    link: int
    remote_bus_id: str
    active: bool = True
    version: int = 4

    def to_json(self) -> dict[str, Any]:
        return {
            "link": self.link,
            "remoteBusId": self.remote_bus_id,
            "active": self.active,
            "version": self.version,
        }


@dataclass
class NvmlGpu:
    index: int
    bus_id: str  # NVML form
    uuid: str
    name: str
    memory_total: int
    serial: str
    minor_number: int
    numa_node: int
    pci_device_id: int  # NVML's (device << 16) | vendor
    compute_capability: tuple[int, int]
    mig_mode: int = 0
    mig_devices: list[MigDevice] = field(default_factory=list)
    nvlinks: list[NvLink] = field(default_factory=list)
    temperature: int = 34
    power_limit_mw: int = 700000
    health: str = "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "busId": self.bus_id,
            "uuid": self.uuid,
            "name": self.name,
            "memoryTotal": self.memory_total,
            "serial": self.serial,
            "minorNumber": self.minor_number,
            "numaNode": self.numa_node,
            "pciDeviceId": self.pci_device_id,
            "computeCapability": list(self.compute_capability),
            "migMode": self.mig_mode,
            "migDevices": [m.to_json() for m in self.mig_devices],
            "nvlinks": [link.to_json() for link in self.nvlinks],
            "temperature": self.temperature,
            "powerLimit": self.power_limit_mw,
            "health": self.health,
        }


def cuda_version(driver_version: str) -> int:
    """The CUDA driver API version a driver branch ships (12040 for 550)."""
    branch = int(driver_version.split(".", 1)[0])
    table = {535: 12020, 545: 12030, 550: 12040, 555: 12050, 560: 12060, 565: 12070}
    return table.get(branch, 12040)


def write_nvml(w: TreeWriter, driver_version: str, gpus: list[NvmlGpu]) -> None:
    doc = {
        "driverVersion": driver_version,
        "cudaDriverVersion": cuda_version(driver_version),
        "nvmlVersion": f"12.{driver_version}",
        "gpus": [g.to_json() for g in sorted(gpus, key=lambda g: g.index)],
    }
    w.write(NVML_JSON, json.dumps(doc, indent=2, sort_keys=False) + "\n")
