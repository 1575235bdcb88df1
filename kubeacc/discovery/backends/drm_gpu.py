"""AMD and Intel GPUs, from sysfs and their DRM nodes (card, render node, AMD's /dev/kfd)."""

from __future__ import annotations

import re

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.pci import PCIFunction
from kubeacc.model import Device, DeviceType, Health, HealthState

AMD = "0x1002"
INTEL = "0x8086"
#: Display controllers (0x03xx); AMD's Instinct parts also use processing accelerator (0x12xx).
GPU_BASE_CLASSES = {AMD: (0x03, 0x12), INTEL: (0x03,)}
EXPECTED_DRIVERS = {AMD: ("amdgpu",), INTEL: ("i915", "xe")}
_DRM_NODE_RE = re.compile(r"^(card|renderD)[0-9]+$")


def drm_nodes(ctx: DiscoveryContext, fn: PCIFunction, name: str) -> list[str]:
    """/dev/dri nodes of a function, from the card and renderD entries under its sysfs dir."""
    nodes = [
        f"/dev/dri/{entry}"
        for entry in ctx.host.listdir(f"{fn.sysfs}/drm", name)
        if _DRM_NODE_RE.match(entry)
    ]
    return ctx.dev_nodes(*nodes, device=name)


class DrmGpuBackend:
    name = "drm"

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        found = []
        for fn in list(ctx.unclaimed()):
            classes = GPU_BASE_CLASSES.get(fn.vendor)
            if classes is None or fn.base_class not in classes or fn.physfn is not None:
                continue
            name = ctx.claim(fn, DeviceType.GPU)
            dev = ctx.pci_device(fn, DeviceType.GPU, name, source="drm")
            nodes = drm_nodes(ctx, fn, name)
            if fn.vendor == AMD and nodes:
                nodes += ctx.dev_nodes("/dev/kfd", device=name)
            dev.device_nodes = nodes
            vram = ctx.host.read_int(f"{fn.sysfs}/mem_info_vram_total", name, required=False)
            if vram is not None and vram > 0:
                dev.memory_bytes = vram
            serial = ctx.host.read_text(f"{fn.sysfs}/serial_number", name, required=False)
            if serial:
                dev.serial = serial
            if fn.driver is None:
                dev.health = Health(state=HealthState.UNHEALTHY, reason="no kernel driver bound")
            elif fn.driver not in EXPECTED_DRIVERS[fn.vendor]:
                dev.attributes["boundTo"] = fn.driver
            elif not nodes:
                dev.health = Health(state=HealthState.UNHEALTHY, reason="no DRM device nodes")
            found.append(dev)
        return found
