"""Baidu KunLun XPUs: PCI vendor 0x1d22; /dev/xpu<N> in address order; VFs as partitions."""

from __future__ import annotations

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.pci import PCIFunction
from kubeacc.model import Device, DeviceType, Health, HealthState, Partition, PartitionKind

VENDOR = "0x1d22"
PF_IDS = {"0x3684"}
VF_IDS = {"0x3685"}
MODEL = "KunLun XPU"
#: Device memory by PCI device id; the kunlun driver exposes none in sysfs. The R200 carries
#: 16 GB of GDDR6.
MEMORY_BYTES = {"0x3684": 16 << 30}


class KunlunBackend:
    name = "kunlun"

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        pfs = [f for f in ctx.unclaimed() if f.vendor == VENDOR and f.device in PF_IDS]
        # A VF whose PF is not on this host (passed through into a VM) is a device of its own.
        lone_vfs = [
            f
            for f in ctx.unclaimed()
            if f.vendor == VENDOR
            and f.device in VF_IDS
            and (f.physfn is None or ctx.function(f.physfn) is None)
        ]
        found = []
        for ordinal, fn in enumerate(sorted(pfs + lone_vfs, key=lambda f: f.bdf)):
            found.append(self._device(ctx, fn, ordinal))
        return found

    def _device(self, ctx: DiscoveryContext, fn: PCIFunction, ordinal: int) -> Device:
        name = ctx.claim(fn, DeviceType.XPU)
        model = ctx.names.device_name(fn.vendor, fn.device)
        dev = ctx.pci_device(fn, DeviceType.XPU, name, source="kunlun", model=model or MODEL)
        dev.memory_bytes = MEMORY_BYTES.get(fn.device)
        dev.device_nodes = ctx.dev_nodes(f"/dev/xpu{ordinal}", device=name)
        dev.device_nodes += [p for p in ("/dev/xpuctrl",) if ctx.host.exists(p)]
        for i, vf in enumerate(fn.virtfns):
            vfn = ctx.function(vf)
            if vfn is not None:
                ctx.claimed.add(vf)
            dev.partitions.append(
                Partition(
                    kind=PartitionKind.SRIOV_VF,
                    index=i,
                    name=f"{name}-vf{i}",
                    bus_id=vf,
                    driver=ctx.host.readlink_name(f"{vfn.sysfs}/driver") if vfn else None,
                )
            )
        if fn.driver is None:
            dev.health = Health(state=HealthState.UNHEALTHY, reason="no kernel driver bound")
        elif not dev.device_nodes:
            dev.health = Health(state=HealthState.UNHEALTHY, reason="no /dev/xpu device node")
        return dev
