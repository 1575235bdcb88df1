"""SmartNICs and RDMA NICs: network controllers with SR-IOV or an RDMA device.

Plain onboard NICs (no SR-IOV, no RDMA) are the host's own network and are not reported.
"""

from __future__ import annotations

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.pci import PCIFunction
from kubeacc.model import SRIOV, Device, DeviceType, Health, HealthState, Partition, PartitionKind

NETWORK_CLASS = 0x02


class NicBackend:
    name = "nic"

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        found = []
        for fn in list(ctx.unclaimed()):
            if fn.base_class != NETWORK_CLASS or fn.physfn is not None:
                continue
            if not self._is_accelerated(ctx, fn):
                continue
            found.append(self._device(ctx, fn))
        return found

    def _is_accelerated(self, ctx: DiscoveryContext, fn: PCIFunction) -> bool:
        if ctx.host.is_dir(f"{fn.sysfs}/infiniband"):
            return True
        total = ctx.host.read_int(f"{fn.sysfs}/sriov_totalvfs", fn.bdf, required=False)
        return bool(total and total > 0)

    def _device(self, ctx: DiscoveryContext, fn: PCIFunction) -> Device:
        name = ctx.claim(fn, DeviceType.NIC)
        dev = ctx.pci_device(fn, DeviceType.NIC, name, source="nic")
        host = ctx.host
        dev.netdevs = host.listdir(f"{fn.sysfs}/net", name)
        dev.rdma_devices = host.listdir(f"{fn.sysfs}/infiniband", name)
        for netdev in dev.netdevs[:1]:
            state = host.read_text(f"{fn.sysfs}/net/{netdev}/operstate", name, required=False)
            if state:
                dev.attributes["linkState"] = state
            speed = host.read_int(f"{fn.sysfs}/net/{netdev}/speed", name, required=False)
            if speed is not None and speed > 0:
                dev.attributes["speedMbps"] = str(speed)
        verbs = [
            f"/dev/infiniband/{e}"
            for e in host.listdir(f"{fn.sysfs}/infiniband_verbs", name)
            if e.startswith("uverbs")
        ]
        dev.device_nodes = ctx.dev_nodes(*verbs, device=name)
        if dev.rdma_devices:
            dev.device_nodes += [p for p in ("/dev/infiniband/rdma_cm",) if host.exists(p)]
        if fn.sriov_total is not None:
            dev.sriov = SRIOV(total_vfs=max(fn.sriov_total, 0), num_vfs=max(fn.sriov_num or 0, 0))
            if fn.sriov_num is not None and fn.sriov_num != len(fn.virtfns):
                host.sink.add(
                    fn.attr("sriov_numvfs"),
                    f"{fn.sriov_num} VFs enabled but {len(fn.virtfns)} virtfn links",
                    name,
                )
        dev.partitions = [self._vf(ctx, i, vf, name) for i, vf in enumerate(fn.virtfns)]
        dev.health = self._health(ctx, fn, dev)
        return dev

    def _vf(self, ctx: DiscoveryContext, index: int, bdf: str, pf_name: str) -> Partition:
        vfn = ctx.function(bdf)
        driver = netdev = None
        if vfn is not None:
            ctx.claimed.add(bdf)
            driver = ctx.host.readlink_name(f"{vfn.sysfs}/driver", pf_name)
            nets = ctx.host.listdir(f"{vfn.sysfs}/net", pf_name)
            netdev = nets[0] if nets else None
        else:
            ctx.host.sink.add(f"/sys/bus/pci/devices/{bdf}", "virtual function not found", pf_name)
        return Partition(
            kind=PartitionKind.SRIOV_VF,
            index=index,
            name=f"{pf_name}-vf{index}",
            bus_id=bdf,
            driver=driver,
            netdev=netdev,
        )

    def _health(self, ctx: DiscoveryContext, fn: PCIFunction, dev: Device) -> Health:
        if fn.driver is None:
            return Health(state=HealthState.UNHEALTHY, reason="no kernel driver bound")
        states = []
        for ib in dev.rdma_devices:
            for port in ctx.host.listdir(f"{fn.sysfs}/infiniband/{ib}/ports", dev.name):
                state = ctx.host.read_text(
                    f"{fn.sysfs}/infiniband/{ib}/ports/{port}/state", dev.name
                )
                if state is not None:
                    states.append(state)
        if states and not any("ACTIVE" in s.upper() for s in states):
            return Health(
                state=HealthState.UNHEALTHY, reason=f"no RDMA port is ACTIVE ({states[0]})"
            )
        return Health()
