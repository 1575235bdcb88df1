"""NVIDIA GPUs: NVML when the host has it, sysfs + /proc/driver/nvidia otherwise.

NVML knows what sysfs can't (UUID, memory, NVLink peers, MIG instances, row-remapping health);
sysfs knows the PCIe placement. With NVML, each GPU is both: NVML facts on top of its PCI
function. A GPU that sits on the bus but that NVML does not show is reported unhealthy.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from typing import Any

import pynvml

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.host import HostRoot
from kubeacc.discovery.pci import PCIFunction
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
#: Where a synthetic host describes the NVML answers of its GPUs (see kubeacc.synthetic.nvml).
SYNTHETIC_NVML = "/.synthetic/nvml.json"
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


def select_nvml(host: HostRoot, mode: str = "auto") -> Any | None:
    """The NVML library that describes this host, or None.

    ``mode`` is ``auto`` (NVML when it answers), ``off`` or ``on`` (like auto, but warn when
    NVML can't be used). A synthetic host root answers through its NVML description; the
    machine's own NVML describes only the machine, so it is used only for host root ``/``.
    """
    if mode == "off":
        return None
    if host.exists(SYNTHETIC_NVML):
        from kubeacc.synthetic.nvmllib import SyntheticNVML

        try:
            return SyntheticNVML.from_file(host.real(SYNTHETIC_NVML))
        except (OSError, ValueError, KeyError, TypeError) as err:
            host.sink.add(SYNTHETIC_NVML, f"NVML description unusable: {err}")
            return None
    if host.root != "/":
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        if mode == "on":
            host.sink.add("libnvidia-ml.so.1", f"NVML unavailable: {err}")
        return None
    return pynvml


def parse_information(text: str) -> dict[str, str]:
    """``Key: value`` lines of /proc/driver/nvidia/gpus/<bdf>/information."""
    info = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


class NvidiaBackend:
    name = "nvidia"

    def __init__(self, nvml_mode: str = "auto"):
        self.nvml_mode = nvml_mode

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        candidates = [
            fn
            for fn in ctx.unclaimed()
            if fn.vendor == VENDOR and fn.class_prefix in GPU_CLASSES and fn.physfn is None
        ]
        nvml = select_nvml(ctx.host, self.nvml_mode)
        if nvml is None and not candidates:
            return []
        driver_version = self._driver_version(ctx)
        devices: dict[str, Device] = {}
        if nvml is not None:
            try:
                devices = self._from_nvml(ctx, nvml)
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
                dev.health = Health(
                    state=HealthState.UNHEALTHY, reason="on the PCI bus but not visible to NVML"
                )
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

    def _from_nvml(self, ctx: DiscoveryContext, nvml: Any) -> dict[str, Device]:
        devices: dict[str, Device] = {}
        handles: dict[str, Any] = {}
        version = _text(nvml.nvmlSystemGetDriverVersion())
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
            dev = self._nvml_device(ctx, nvml, handle, bdf)
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
        dev.model = _text(nvml.nvmlDeviceGetName(handle))
        dev.uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        dev.memory_bytes = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        dev.serial = self._optional(nvml, "nvmlDeviceGetSerial", handle)
        minor = self._optional(nvml, "nvmlDeviceGetMinorNumber", handle)
        self._set_nodes(ctx, dev, [f"/dev/nvidia{minor}"] if minor is not None else [])
        dev.partitions = self._mig(ctx, nvml, handle, dev)
        dev.health = self._health(nvml, handle)
        return dev

    @staticmethod
    def _optional(nvml: Any, call: str, *args: Any) -> Any | None:
        try:
            value = getattr(nvml, call)(*args)
        except pynvml.NVMLError:
            return None
        return _text(value) if isinstance(value, bytes) else value

    def _health(self, nvml: Any, handle: Any) -> Health:
        try:
            _corr, _unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(handle)
        except pynvml.NVMLError:
            return Health()
        if failure:
            return Health(state=HealthState.UNHEALTHY, reason="memory row remapping failed")
        if pending:
            return Health(
                state=HealthState.UNHEALTHY, reason="memory row remapping pending a GPU reset"
            )
        return Health()

    def _mig(self, ctx: DiscoveryContext, nvml: Any, handle: Any, dev: Device) -> list[Partition]:
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError:
            return []
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        dev.attributes["migMode"] = "enabled"
        parts = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except pynvml.NVMLError:
                continue
            name = _text(nvml.nvmlDeviceGetName(mig))
            match = _MIG_PROFILE_RE.search(name)
            parts.append(
                Partition(
                    kind=PartitionKind.MIG,
                    index=i,
                    name=f"{dev.name}-mig-{i}",
                    uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                    profile=match.group(1) if match else None,
                    memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(mig).total),
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
                (direct if remote in devices else switched)[bdf][remote] += 1
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
