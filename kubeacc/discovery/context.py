"""What every discovery backend gets: the host, its PCI functions, names, and who claimed what."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from kubeacc.discovery.pci import PCIFunction, complete
from kubeacc.discovery.pciids import PciIds
from kubeacc.host.files import HostRoot
from kubeacc.host.interface import Host
from kubeacc.model import Device, DeviceType, PCIIdentity, device_name


class DiscoveryContext(msgspec.Struct, dict=True):  # dict: the index __post_init__ adds
    #: The node's files, read for this pass (warnings, deadline).
    host: HostRoot
    functions: list[PCIFunction]
    names: PciIds
    #: The node itself: what a backend asks beyond its files (NVML).
    node: Host
    claimed: set[str] = msgspec.field(default_factory=set)

    def __post_init__(self) -> None:
        self._by_bdf = {fn.bdf: fn for fn in self.functions}

    def function(self, bdf: str) -> PCIFunction | None:
        return self._by_bdf.get(bdf)

    def unclaimed(self) -> Iterator[PCIFunction]:
        """Functions no earlier backend took, in address order."""
        return (fn for fn in self.functions if fn.bdf not in self.claimed)

    def claim(self, fn: PCIFunction, dtype: DeviceType) -> str:
        """Take a function for a backend: reads the rest of its sysfs attributes once."""
        self.claimed.add(fn.bdf)
        name = device_name(dtype, fn.bdf)
        complete(self.host, fn, name)
        return name

    def pci_device(
        self,
        fn: PCIFunction,
        dtype: DeviceType,
        name: str,
        source: str,
        model: str | None = None,
    ) -> Device:
        """A Device with everything PCI tells: identity, topology, NUMA, names."""
        identity: PCIIdentity = fn.identity()
        return Device(
            name=name,
            type=dtype,
            vendor=self.names.vendor_name(fn.vendor),
            model=model or self.names.model_name(fn.vendor, fn.device),
            index=0,
            source=source,
            pci=identity,
            numa_node=fn.numa_node,
            pcie_root=fn.pcie_root,
            pcie_path=list(fn.bridges),
            local_cpus=fn.local_cpus,
        )

    def dev_nodes(self, *paths: str, device: str | None = None) -> list[str]:
        """The given /dev paths that exist on the host; a missing one is a warning."""
        found = []
        for path in paths:
            if self.host.exists(path):
                found.append(path)
            elif device is not None:
                self.host.sink.add(path, "device node is missing", device)
        return found
