"""One pass over the host's PCI functions.

``/sys/bus/pci/devices/<bdf>`` is a symlink into ``/sys/devices/pci<domain>:<bus>/...``; the
components of the resolved path are the root complex, then every bridge down to the function.
That path is the device's PCIe topology: no lspci, no config-space parsing.
"""

from __future__ import annotations

import re

import msgspec

from kubeacc.host.files import HostRoot
from kubeacc.model import PCIIdentity, is_bdf

PCI_DEVICES = "/sys/bus/pci/devices"
_ROOT_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


class PCIFunction(msgspec.Struct):
    """What sysfs says about one PCI function; ``sysfs`` is its resolved host path."""

    bdf: str
    sysfs: str
    vendor: str
    device: str
    class_code: str
    subsystem_vendor: str | None = None
    subsystem_device: str | None = None
    revision: str | None = None
    driver: str | None = None
    iommu_group: int | None = None
    numa_node: int = -1
    local_cpus: str | None = None
    pcie_root: str | None = None
    bridges: list[str] = msgspec.field(default_factory=list)
    physfn: str | None = None
    virtfns: list[str] = msgspec.field(default_factory=list)
    sriov_total: int | None = None
    sriov_num: int | None = None

    @property
    def class_prefix(self) -> str:
        """Base class and subclass, e.g. ``0x0302`` for a 3D controller."""
        return self.class_code[:6]

    @property
    def base_class(self) -> int:
        return int(self.class_code[2:4], 16)

    @property
    def vendor_int(self) -> int:
        return int(self.vendor, 16)

    @property
    def device_int(self) -> int:
        return int(self.device, 16)

    def attr(self, name: str) -> str:
        """Host path of one of this function's sysfs attributes."""
        return f"{self.sysfs}/{name}"

    def identity(self) -> PCIIdentity:
        return PCIIdentity(
            bus_id=self.bdf,
            vendor_id=self.vendor,
            device_id=self.device,
            class_id=self.class_code,
            subsystem_vendor_id=self.subsystem_vendor,
            subsystem_device_id=self.subsystem_device,
            revision=self.revision,
            driver=self.driver,
            iommu_group=self.iommu_group,
        )


def _topology(sysfs: str) -> tuple[str | None, list[str]]:
    """Root complex and bridges above the function, from its resolved sysfs path."""
    parts = sysfs.strip("/").split("/")
    for i, part in enumerate(parts):
        if _ROOT_RE.match(part):
            chain = [p for p in parts[i + 1 :] if is_bdf(p)]
            return part, chain[:-1]
    return None, []


def read_function(host: HostRoot, bdf: str) -> PCIFunction | None:
    """Read one function; None (with a warning) when its identity can't be read."""
    link = f"{PCI_DEVICES}/{bdf}"
    sysfs = host.resolve(link)
    if sysfs is None:
        host.sink.add(link, "dangling or looping symlink; function skipped", bdf)
        return None
    if not host.is_dir(sysfs):
        host.sink.add(link, "does not lead to a device directory; function skipped", bdf)
        return None
    vendor = host.read_hex(f"{sysfs}/vendor", bdf)
    device = host.read_hex(f"{sysfs}/device", bdf)
    class_code = host.read_hex(f"{sysfs}/class", bdf, digits=6)
    if vendor is None or device is None or class_code is None:
        host.sink.add(sysfs, "PCI identity unreadable; function skipped", bdf)
        return None
    root, bridges = _topology(sysfs)
    fn = PCIFunction(
        bdf=bdf,
        sysfs=sysfs,
        vendor=vendor,
        device=device,
        class_code=class_code,
        pcie_root=root,
        bridges=bridges,
    )
    return fn


def complete(host: HostRoot, fn: PCIFunction, name: str) -> None:
    """Read the rest of a function that a backend claimed; ``name`` labels the warnings."""
    s = fn.sysfs
    fn.subsystem_vendor = host.read_hex(f"{s}/subsystem_vendor", name, required=False)
    fn.subsystem_device = host.read_hex(f"{s}/subsystem_device", name, required=False)
    fn.revision = host.read_hex(f"{s}/revision", name, digits=2, required=False)
    fn.driver = host.readlink_name(f"{s}/driver", name)
    group = host.readlink_name(f"{s}/iommu_group", name)
    if group is not None:
        if group.isdigit():
            fn.iommu_group = int(group)
        else:
            host.sink.add(f"{s}/iommu_group", f"not an IOMMU group: {group!r}", name)
    numa = host.read_int(f"{s}/numa_node", name, required=False)
    if numa is not None:
        if numa < -1:
            host.sink.add(f"{s}/numa_node", f"impossible NUMA node {numa}; using -1", name)
        fn.numa_node = max(numa, -1)
    fn.local_cpus = host.read_text(f"{s}/local_cpulist", name, required=False) or None
    if host.exists(f"{s}/sriov_totalvfs"):
        fn.sriov_total = host.read_int(f"{s}/sriov_totalvfs", name)
        fn.sriov_num = host.read_int(f"{s}/sriov_numvfs", name)
        fn.virtfns = _virtfns(host, fn, name)


def _virtfns(host: HostRoot, fn: PCIFunction, name: str) -> list[str]:
    found: list[tuple[int, str]] = []
    for entry in host.listdir(fn.sysfs, name):
        if not entry.startswith("virtfn") or not entry[6:].isdigit():
            continue
        target = host.readlink_name(f"{fn.sysfs}/{entry}", name)
        if target is None or not is_bdf(target):
            host.sink.add(f"{fn.sysfs}/{entry}", "virtual function link unreadable", name)
            continue
        found.append((int(entry[6:]), target))
    return [bdf for _, bdf in sorted(found)]


def scan(host: HostRoot) -> list[PCIFunction]:
    """Every readable PCI function on the host, in address order."""
    functions = []
    for entry in host.listdir(PCI_DEVICES, required=True):
        if not is_bdf(entry):
            host.sink.add(f"{PCI_DEVICES}/{entry}", "not a PCI address; ignored")
            continue
        fn = read_function(host, entry)
        if fn is None:
            continue
        physfn = host.readlink_name(f"{fn.sysfs}/physfn", entry)
        if physfn is not None and is_bdf(physfn):
            fn.physfn = physfn
        functions.append(fn)
    return functions
