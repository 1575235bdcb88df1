"""NVIDIA GPUs: NVML when the host has it, sysfs + /proc/driver/nvidia otherwise.

NVML knows what sysfs can't (UUID, memory, NVLink peers, MIG instances, row-remapping health);
sysfs knows the PCIe placement. With NVML, each GPU is both: NVML facts on top of its PCI
function. A GPU that sits on the bus but that NVML does not show is reported unhealthy.

NVML errors degrade one field or one GPU, never the scan: a failed optional call leaves its
field empty (with a warning), a GPU whose NVML handle fails comes from sysfs and is unhealthy
with NVML's error as the reason, and one that answers "GPU is lost" to any call is unhealthy.
Only failures of the library itself (init, device count) fall back to sysfs for every GPU.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from typing import Any

import pynvml

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.pci import PCIFunction
from kubeacc.host.interface import select_nvml
from kubeacc.model import (
    Device,
    DeviceType,
    Health,
    HealthState,
    Link,
    LinkKind,
    Partition,
    PartitionKind,
    PCIIdentity,
    device_name,
    is_bdf,
)

VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")
PROC_GPUS = "/proc/driver/nvidia/gpus"
PROC_VERSION = "/proc/driver/nvidia/version"
SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_MIG_PROFILE_RE = re.compile(r"MIG\s+(\S+)$")
_VERSION_RE = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)")


def nvml_bdf(bus_id: str | bytes) -> str | None:
    """NVML's ``00000000:3D:00.0`` as the kernel's ``0000:3d:00.0``."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    bdf = text.strip().lower()[-12:]
    return bdf if is_bdf(bdf) else None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _is_gpu(fn: PCIFunction | None) -> bool:
    """An NVIDIA GPU's PCI function (a peer NVML could not describe is still a GPU, not a
    switch)."""
    return (
        fn is not None
        and fn.vendor == VENDOR
        and fn.class_prefix in GPU_CLASSES
        and fn.physfn is None
    )


def parse_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of /proc/driver/nvidia/gpus/<bdf>/information."""
    info = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


class _NvmlReader:
    """NVML calls for one device: an error leaves that value None and a warning behind."""

    def __init__(self, ctx: DiscoveryContext, nvml: Any, device: str | None):
        self.ctx = ctx
        self.nvml = nvml
        self.device = device
        #: NVML's "GPU is lost" error, once any call answered it.
        self.lost: str | None = None

    def get(self, call: str, *args: Any, absent_ok: bool = False) -> Any | None:
        try:
            value = getattr(self.nvml, call)(*args)
        except pynvml.NVMLError as err:
            code = getattr(err, "value", None)
            if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.lost = str(err)
            # NOT_SUPPORTED: this GPU has no such thing (no serial, no MIG), not a fault.
            absent = code == pynvml.NVML_ERROR_NOT_SUPPORTED or (
                absent_ok and code == pynvml.NVML_ERROR_NOT_FOUND
            )
            if not absent:
                self.ctx.host.sink.add(f"nvml:{call}", f"NVML error: {err}", self.device)
            return None
        return _text(value) if isinstance(value, bytes) else value


class NvidiaBackend:
    name = "nvidia"

    def __init__(self, nvml_mode: str = "auto"):
        self.nvml_mode = nvml_mode

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        candidates = [fn for fn in ctx.unclaimed() if _is_gpu(fn)]
        nvml = select_nvml(ctx.node, ctx.host.sink, self.nvml_mode)
        if nvml is None and not candidates:
            return []
        driver_version = self._driver_version(ctx)
        devices: dict[str, Device] = {}
        failed: dict[str, str] = {}
        if nvml is not None:
            try:
                devices = self._from_nvml(ctx, nvml, failed)
            except pynvml.NVMLError as err:
                ctx.host.sink.add("nvml", f"NVML query failed, using sysfs: {err}")
                devices = {}
            finally:
                if nvml is pynvml:
                    with contextlib.suppress(pynvml.NVMLError):
                        pynvml.nvmlShutdown()
        for fn in candidates:
            if fn.bdf in devices:
                continue
            dev = self._from_sysfs(ctx, fn)
            if nvml is not None and dev.health.healthy:
                reason = failed.get(fn.bdf, "on the PCI bus but not visible to NVML")
                dev.health = Health(state=HealthState.UNHEALTHY, reason=reason)
            devices[fn.bdf] = dev
        for dev in devices.values():
            if driver_version and dev.driver_version is None:
                dev.driver_version = driver_version
        return list(devices.values())

    # -- sysfs and /proc ---------------------------------------------------------------------

    def _driver_version(self, ctx: DiscoveryContext) -> str | None:
        text = ctx.host.read_text(PROC_VERSION, required=False)
        if text is None:
            return None
        match = _VERSION_RE.search(text)
        return match.group(1) if match else None

    def _from_sysfs(self, ctx: DiscoveryContext, fn: PCIFunction) -> Device:
        name = ctx.claim(fn, DeviceType.GPU)
        dev = ctx.pci_device(fn, DeviceType.GPU, name, source="nvidia-sysfs")
        info_path = f"{PROC_GPUS}/{fn.bdf}/information"
        text = ctx.host.read_text(info_path, name, required=fn.driver == "nvidia")
        info = parse_information(text) if text is not None else {}
        if text is not None and "Device Minor" not in info:
            ctx.host.sink.add(info_path, "truncated: no 'Device Minor' line", name)
        if info.get("Model"):
            dev.model = info["Model"]
        uuid = info.get("GPU UUID")
        if uuid:
            dev.uuid = uuid
        minor = info.get("Device Minor", "")
        nodes = [f"/dev/nvidia{minor}"] if minor.isdigit() else []
        self._set_nodes(ctx, dev, nodes)
        if fn.driver is None:
            dev.health = Health(state=HealthState.UNHEALTHY, reason="no kernel driver bound")
        elif fn.driver == "nvidia" and info.get("GPU Excluded", "No").lower().startswith("yes"):
            dev.health = Health(state=HealthState.UNHEALTHY, reason="excluded by the driver")
        elif fn.driver != "nvidia":
            dev.attributes["boundTo"] = fn.driver
        return dev

    def _set_nodes(self, ctx: DiscoveryContext, dev: Device, nodes: list[str]) -> None:
        if dev.pci and dev.pci.driver not in (None, "nvidia"):
            return
        found = ctx.dev_nodes(*nodes, device=dev.name)
        found += [p for p in SHARED_NODES if ctx.host.exists(p)]
        dev.device_nodes = found

    # -- NVML --------------------------------------------------------------------------------

    def _from_nvml(
        self, ctx: DiscoveryContext, nvml: Any, failed: dict[str, str]
    ) -> dict[str, Device]:
        """NVML's GPUs by address; ``failed`` gets the NVML error of GPUs it could not read."""
        devices: dict[str, Device] = {}
        handles: dict[str, Any] = {}
        version = _NvmlReader(ctx, nvml, None).get("nvmlSystemGetDriverVersion")
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                bdf = nvml_bdf(nvml.nvmlDeviceGetPciInfo(handle).busId)
            except pynvml.NVMLError as err:
                ctx.host.sink.add(f"nvml:{index}", f"GPU {index} unreadable: {err}")
                continue
            if bdf is None:
                ctx.host.sink.add(f"nvml:{index}", "NVML reported no usable PCI address")
                continue
            try:
                dev = self._nvml_device(ctx, nvml, handle, bdf)
            except pynvml.NVMLError as err:
                ctx.host.sink.add(f"nvml:{bdf}", f"GPU unreadable through NVML: {err}")
                failed[bdf] = f"NVML error: {err}"
                continue
            dev.driver_version = version
            devices[bdf] = dev
            handles[bdf] = handle
        self._links(ctx, nvml, devices, handles)
        return devices

    def _nvml_device(self, ctx: DiscoveryContext, nvml: Any, handle: Any, bdf: str) -> Device:
        fn = ctx.function(bdf)
        if fn is not None and fn.bdf not in ctx.claimed:
            name = ctx.claim(fn, DeviceType.GPU)
            dev = ctx.pci_device(fn, DeviceType.GPU, name, source="nvml")
        else:
            name = device_name(DeviceType.GPU, bdf)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            ids = int(pci.pciDeviceId)
            dev = Device(
                name=name,
                type=DeviceType.GPU,
                vendor="NVIDIA",
                model="",
                index=0,
                source="nvml",
                pci=PCIIdentity(
                    bus_id=bdf,
                    vendor_id=f"0x{ids & 0xFFFF:04x}",
                    device_id=f"0x{ids >> 16:04x}",
                    class_id="0x030200",
                ),
            )
            ctx.host.sink.add(f"/sys/bus/pci/devices/{bdf}", "GPU not found in sysfs", name)
        read = _NvmlReader(ctx, nvml, dev.name)
        dev.model = read.get("nvmlDeviceGetName", handle) or dev.model
        dev.uuid = read.get("nvmlDeviceGetUUID", handle)
        memory = read.get("nvmlDeviceGetMemoryInfo", handle)
        dev.memory_bytes = int(memory.total) if memory is not None else None
        dev.serial = read.get("nvmlDeviceGetSerial", handle)
        minor = read.get("nvmlDeviceGetMinorNumber", handle)
        self._set_nodes(ctx, dev, [f"/dev/nvidia{minor}"] if minor is not None else [])
        dev.partitions = self._mig(ctx, read, handle, dev)
        dev.health = self._health(read, handle)
        return dev

    def _health(self, read: _NvmlReader, handle: Any) -> Health:
        rows = read.get("nvmlDeviceGetRemappedRows", handle)
        if read.lost is not None:
            return Health(state=HealthState.UNHEALTHY, reason=f"NVML: {read.lost}")
        if rows is None:
            return Health()
        _corr, _unc, pending, failure = rows
        if failure:
            return Health(state=HealthState.UNHEALTHY, reason="memory row remapping failed")
        if pending:
            return Health(
                state=HealthState.UNHEALTHY, reason="memory row remapping pending a GPU reset"
            )
        return Health()

    def _mig(
        self, ctx: DiscoveryContext, read: _NvmlReader, handle: Any, dev: Device
    ) -> list[Partition]:
        mode = read.get("nvmlDeviceGetMigMode", handle)
        if mode is None or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        dev.attributes["migMode"] = "enabled"
        parts = []
        for i in range(read.get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = read.get("nvmlDeviceGetMigDeviceHandleByIndex", handle, i, absent_ok=True)
            if mig is None:
                continue
            name = read.get("nvmlDeviceGetName", mig)
            uuid = read.get("nvmlDeviceGetUUID", mig)
            memory = read.get("nvmlDeviceGetMemoryInfo", mig)
            if name is None or uuid is None or memory is None:
                continue  # the warning names the call that failed
            match = _MIG_PROFILE_RE.search(name)
            parts.append(
                Partition(
                    kind=PartitionKind.MIG,
                    index=i,
                    name=f"{dev.name}-mig-{i}",
                    uuid=uuid,
                    profile=match.group(1) if match else None,
                    memory_bytes=int(memory.total),
                )
            )
        return parts

    def _links(
        self,
        ctx: DiscoveryContext,
        nvml: Any,
        devices: dict[str, Device],
        handles: dict[str, Any],
    ) -> None:
        """NVLink peers. Links that end on an NVSwitch join every GPU on that switch fabric."""
        direct: dict[str, dict[str, int]] = {b: defaultdict(int) for b in devices}
        switched: dict[str, dict[str, int]] = {b: defaultdict(int) for b in devices}
        for bdf, handle in handles.items():
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if nvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = nvml_bdf(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
                except pynvml.NVMLError:
                    continue
                if remote is None or remote == bdf:
                    continue
                gpu = remote in devices or _is_gpu(ctx.function(remote))
                (direct if gpu else switched)[bdf][remote] += 1
        for bdf, dev in devices.items():
            peers = dict(direct[bdf])
            for other in devices:
                if other == bdf:
                    continue
                shared = set(switched[bdf]) & set(switched[other])
                if shared:
                    count = min(sum(switched[bdf].values()), sum(switched[other].values()))
                    peers[other] = peers.get(other, 0) + count
            dev.links = [
                Link(peer=peer, kind=LinkKind.NVLINK, count=count)
                for peer, count in sorted(peers.items())
            ]
