"""What NVML says about the MIG GPUs of the node: profiles, placements, instances, MIG devices.

Reads only; prepare (:mod:`kubeacc.agent.dra.mig.prepare`) creates and destroys instances.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml

from kubeacc.agent.dra.mig.model import MEMORY_SLICES, GpuMig, Instance, Profile
from kubeacc.host import Host, select_nvml
from kubeacc.host.files import WarningSink


def nvml_bus(bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` and sysfs' ``0000:1b:00.0`` as one form."""
    return bus_id.lower()[-12:]


def nvml_text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gpu_handles(nvml: Any) -> dict[str, Any]:
    out = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            out[nvml_bus(nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId))] = h
        except pynvml.NVMLError:
            continue
    return out


def listed(call: Callable[..., Any], target: Any, arg: int, kind: Any, cap: int) -> list[Any]:
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
        places = listed(
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            handle,
            info.id,
            pynvml.c_nvmlGpuInstancePlacement_t,
            MEMORY_SLICES,
        )
        name = nvml_text(info.name).removeprefix("MIG ")
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
        for gi in listed(
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
        bus_id=nvml_bus(bus_id),
        uuid=nvml_text(nvml.nvmlDeviceGetUUID(handle)),
        minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
        profiles=tuple(profiles),
        instances=tuple(sorted(instances, key=lambda i: i.gi)),
    )


def mig_uuids(nvml: Any, handle: Any) -> dict[int, str]:
    """GPU instance id -> the MIG device UUID (of its first compute instance)."""
    out: dict[int, str] = {}
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            out.setdefault(
                int(nvml.nvmlDeviceGetGpuInstanceId(mig)), nvml_text(nvml.nvmlDeviceGetUUID(mig))
            )
        except pynvml.NVMLError:
            continue
    return out


def nvml_for(host: Host, mode: str) -> Callable[[], Any | None]:
    """The NVML library of the node, looked up per use."""

    def lib() -> Any | None:
        return select_nvml(host, WarningSink(), mode)

    return lib
