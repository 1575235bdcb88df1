"""Discovery against NVML: what kube-acc reads from the node's files (``/sys``,
``/proc/driver/nvidia``) and what the driver's NVML says must be the same GPUs.

From the files alone (discovery with NVML off): the NVIDIA GPUs' count, bus ids, UUIDs and the
kernel module's version. The memory kube-acc publishes (``kubeacc.io/memory``) comes from NVML
through discovery, and is checked against NVML's own answer per GPU.
"""

from __future__ import annotations

from typing import Any

import pynvml

from kubeacc.agent.dra.mig.nvml import nvml_bus, nvml_text
from kubeacc.discovery.discover import discover
from kubeacc.host import Host, NvmlUnavailable
from kubeacc.model import Device, DeviceType
from kubeacc.selftest.report import Check, failed, skipped, verdict

NAME = "discovery against NVML"


def nvidia_gpus(host: Host, nvml: str) -> list[Device]:
    inv = discover(host, nvml=nvml, types=[DeviceType.GPU])
    return [d for d in inv.devices if d.vendor.lower() == "nvidia" and d.pci is not None]


def _nvml_gpus(lib: Any) -> dict[str, dict[str, Any]]:
    """bus id -> {uuid, memory} of every GPU NVML lists."""
    out = {}
    for i in range(lib.nvmlDeviceGetCount()):
        h = lib.nvmlDeviceGetHandleByIndex(i)
        bus = nvml_bus(nvml_text(lib.nvmlDeviceGetPciInfo(h).busId))
        out[bus] = {
            "uuid": nvml_text(lib.nvmlDeviceGetUUID(h)),
            "memory": int(lib.nvmlDeviceGetMemoryInfo(h).total),
        }
    return out


def discovery_checks(host: Host, files_view: list[Device] | None = None) -> list[Check]:
    """``files_view``: the host's NVIDIA GPUs found with NVML off, when the caller has them."""
    if files_view is None:
        files_view = nvidia_gpus(host, "off")
    try:
        lib = host.nvml()
    except NvmlUnavailable as exc:
        if not files_view:
            return [skipped(NAME, "no NVIDIA GPU and no NVML on this node")]
        return [failed(NAME, f"{len(files_view)} NVIDIA GPUs found but NVML: {exc.message}")]
    try:
        listed = _nvml_gpus(lib)
        nvml_driver = nvml_text(lib.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as exc:
        return [failed(NAME, f"NVML refused a query: {exc}")]
    found = {nvml_bus(d.pci.bus_id): d for d in files_view if d.pci}
    out = [
        verdict(
            "NVML: GPU count",
            len(found) == len(listed),
            f"discovery {len(found)}, NVML {len(listed)}",
        ),
        verdict(
            "NVML: bus ids",
            set(found) == set(listed),
            _differ(
                "only discovery", set(found) - set(listed), "only NVML", set(listed) - set(found)
            )
            or ", ".join(sorted(found)),
        ),
    ]
    modules = {d.driver_version for d in files_view if d.driver_version}
    out.append(
        verdict(
            "NVML: driver version",
            modules == {nvml_driver},
            f"kernel module {', '.join(sorted(modules)) or 'unknown'}, NVML {nvml_driver}",
        )
    )
    published = {nvml_bus(d.pci.bus_id): d for d in nvidia_gpus(host, "on") if d.pci}
    for bus in sorted(set(found) & set(listed)):
        want = listed[bus]
        uuid = found[bus].uuid
        out.append(
            verdict(
                f"GPU {bus}: UUID", uuid == want["uuid"], f"discovery {uuid}, NVML {want['uuid']}"
            )
        )
        pub = published.get(bus)
        memory = pub.memory_bytes if pub else None
        out.append(
            verdict(
                f"GPU {bus}: memory",
                memory == want["memory"],
                f"published {_mib(memory)}, NVML {_mib(want['memory'])}",
            )
        )
    return out


def _mib(value: int | None) -> str:
    return "none" if value is None else f"{value >> 20} MiB"


def _differ(a_name: str, a: set[str], b_name: str, b: set[str]) -> str:
    parts = [f"{n}: {', '.join(sorted(s))}" for n, s in ((a_name, a), (b_name, b)) if s]
    return "; ".join(parts)
