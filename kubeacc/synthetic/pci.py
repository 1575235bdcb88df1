"""PCI functions, bridges, drivers, IOMMU groups and SR-IOV in a synthetic ``/sys``.

The layout is the kernel's: every function's real directory sits under its root complex
(``/sys/devices/pciDDDD:BB``) nested below each bridge on the way, and ``/sys/bus/pci/devices``
holds relative symlinks to those directories. Bridges are functions too (class ``0x060400``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import PurePosixPath

from kubeacc.synthetic.fsw import TreeWriter
from kubeacc.synthetic.system import NumaLayout, format_cpulist, format_cpumask

PCI_BUS = "/sys/bus/pci"
DEVICES = "/sys/devices"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"

CLASS_PCI_BRIDGE = 0x060400
CLASS_HOST_BRIDGE = 0x060000

#: ``iommu_group`` value meaning "give the function a group of its own".
AUTO_GROUP = -1

_BDF_RE = re.compile(r"^([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$")

_LINK_SPEED_CODES = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}

#: The usual PCIe link of a Gen5 x16 slot, as ``(current_link_speed, current_link_width)``.
GEN5_X16 = ("32.0 GT/s PCIe", 16)
GEN4_X16 = ("16.0 GT/s PCIe", 16)
GEN3_X16 = ("8.0 GT/s PCIe", 16)
GEN4_X4 = ("16.0 GT/s PCIe", 4)
GEN3_X4 = ("8.0 GT/s PCIe", 4)


@dataclass(frozen=True, order=True)
class Bdf:
    """A PCI address. ``str()`` gives the kernel's form, ``0000:3d:00.0``."""

    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str | Bdf) -> Bdf:
        if isinstance(text, Bdf):
            return text
        m = _BDF_RE.match(text)
        if not m or int(m.group(3), 16) > 0x1F:
            raise ValueError(f"not a PCI address (dddd:bb:dd.f): {text!r}")
        return cls(int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), int(m.group(4)))

    @classmethod
    def from_rid(cls, domain: int, rid: int) -> Bdf:
        return cls(domain, (rid >> 8) & 0xFF, (rid >> 3) & 0x1F, rid & 0x7)

    @property
    def devfn(self) -> int:
        return (self.device << 3) | self.function

    @property
    def rid(self) -> int:
        """Routing id: bus and devfn in 16 bits (what SR-IOV offsets count in)."""
        return (self.bus << 8) | self.devfn

    def nvml(self) -> str:
        """NVML's bus id form: 8-digit domain, upper-case hex (``00000000:3D:00.0``)."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"


class PortType(IntEnum):
    """PCI Express capability device/port type (bits 7:4 of the capabilities register)."""

    ENDPOINT = 0
    LEGACY_ENDPOINT = 1
    ROOT_PORT = 4
    UPSTREAM = 5
    DOWNSTREAM = 6
    PCIE_TO_PCI = 7
    RC_INTEGRATED = 9


@dataclass
class RootHandle:
    """A PCI host bridge / root complex, ``/sys/devices/pciDDDD:BB``."""

    domain: int
    bus: int
    numa: int
    sysfs: PurePosixPath

    @property
    def name(self) -> str:
        """The root's name as topology code uses it: ``pci0000:3a``."""
        return self.sysfs.name

    @property
    def secondary_bus(self) -> int:
        return self.bus


@dataclass
class PciFunction:
    """One function (bridge or endpoint) already written to the tree."""

    bdf: Bdf
    sysfs: PurePosixPath
    parent: RootHandle | PciFunction
    root: RootHandle
    vendor: int
    device: int
    class_code: int
    subsystem: tuple[int, int]
    revision: int
    numa: int
    driver: str | None
    iommu_group: int | None
    port_type: PortType
    link: tuple[str, int] | None
    secondary_bus: int | None = None
    subordinate_bus: int | None = None
    physfn: Bdf | None = None
    vfs: list[Bdf] = field(default_factory=list)

    @property
    def is_bridge(self) -> bool:
        return (self.class_code >> 8) == (CLASS_PCI_BRIDGE >> 8)

    @property
    def name(self) -> str:
        return str(self.bdf)


Parent = RootHandle | PciFunction | str | Bdf


def config_space(fn: PciFunction) -> bytes:
    """256 bytes of configuration space: standard header plus a PCI Express capability."""
    cfg = bytearray(256)

    def put16(off: int, val: int) -> None:
        cfg[off : off + 2] = (val & 0xFFFF).to_bytes(2, "little")

    def put32(off: int, val: int) -> None:
        cfg[off : off + 4] = (val & 0xFFFFFFFF).to_bytes(4, "little")

    put16(0x00, fn.vendor)
    put16(0x02, fn.device)
    put16(0x04, 0x0407 if fn.is_bridge else 0x0406)  # memory, bus master, INTx off
    put16(0x06, 0x0010)  # capabilities list present
    cfg[0x08] = fn.revision & 0xFF
    cfg[0x09] = fn.class_code & 0xFF
    cfg[0x0A] = (fn.class_code >> 8) & 0xFF
    cfg[0x0B] = (fn.class_code >> 16) & 0xFF
    if fn.is_bridge:
        cfg[0x0E] = 0x01
        cfg[0x18] = fn.bdf.bus
        cfg[0x19] = fn.secondary_bus or 0
        cfg[0x1A] = fn.subordinate_bus or 0
    else:
        put16(0x2C, fn.subsystem[0])
        put16(0x2E, fn.subsystem[1])
    cfg[0x34] = 0x40
    cfg[0x40] = 0x10  # PCI Express capability id, end of list
    put16(0x42, 0x0002 | (int(fn.port_type) << 4))
    if fn.link is not None:
        speed = _LINK_SPEED_CODES.get(fn.link[0].split()[0], 0)
        width = fn.link[1]
        put32(0x4C, speed | (width << 4))  # link capabilities
        put16(0x52, speed | (width << 4))  # link status
    return bytes(cfg)


def modalias(fn: PciFunction) -> str:
    return (
        f"pci:v{fn.vendor:08X}d{fn.device:08X}sv{fn.subsystem[0]:08X}sd{fn.subsystem[1]:08X}"
        f"bc{(fn.class_code >> 16) & 0xFF:02X}sc{(fn.class_code >> 8) & 0xFF:02X}"
        f"i{fn.class_code & 0xFF:02X}"
    )


class PciTree:
    """Writes PCI functions and keeps the bookkeeping needed for links between them."""

    def __init__(self, w: TreeWriter, numa: NumaLayout, iommu: bool = True) -> None:
        self.w = w
        self.numa = numa
        self.iommu = iommu
        self.roots: dict[tuple[int, int], RootHandle] = {}
        self.functions: dict[Bdf, PciFunction] = {}
        self._next_group = 0
        w.write(f"{PCI_BUS}/rescan")
        w.write(f"{PCI_BUS}/drivers_probe")
        w.attr(f"{PCI_BUS}/drivers_autoprobe", 1)
        w.mkdir(f"{PCI_BUS}/devices")
        w.mkdir(f"{PCI_BUS}/drivers")

    # -- lookup -------------------------------------------------------------------------------

    def get(self, bdf: str | Bdf) -> PciFunction:
        key = Bdf.parse(bdf)
        try:
            return self.functions[key]
        except KeyError:
            raise KeyError(f"no PCI function {key} in this host") from None

    def _parent(self, parent: Parent) -> RootHandle | PciFunction:
        if isinstance(parent, RootHandle | PciFunction):
            return parent
        fn = self.get(parent)
        if not fn.is_bridge:
            raise ValueError(f"{fn.bdf} is not a bridge and cannot parent functions")
        return fn

    # -- root complexes -----------------------------------------------------------------------

    def root_complex(self, domain: int, bus: int, numa: int = -1) -> RootHandle:
        key = (domain, bus)
        if key in self.roots:
            return self.roots[key]
        path = PurePosixPath(DEVICES) / f"pci{domain:04x}:{bus:02x}"
        root = RootHandle(domain, bus, numa, path)
        self.w.mkdir(path)
        self.w.write(path / "uevent")
        self._pci_bus_dir(path, domain, bus, numa)
        self.roots[key] = root
        return root

    def _pci_bus_dir(self, owner: PurePosixPath, domain: int, bus: int, numa: int) -> None:
        name = f"{domain:04x}:{bus:02x}"
        d = owner / "pci_bus" / name
        cpus = self.numa.node_cpus(numa)
        self.w.attr(d / "cpulistaffinity", format_cpulist(cpus))
        self.w.attr(d / "cpuaffinity", format_cpumask(cpus, self.numa.nr_cpus))
        self.w.write(d / "rescan")
        self.w.symlink(f"/sys/class/pci_bus/{name}", d)

    # -- functions ----------------------------------------------------------------------------

    def add(
        self,
        parent: Parent,
        bdf: str | Bdf,
        vendor: int,
        device: int,
        class_code: int,
        *,
        driver: str | None = None,
        numa: int | None = None,
        subsystem: tuple[int, int] | None = None,
        revision: int = 0,
        iommu_group: int | None = AUTO_GROUP,
        link: tuple[str, int] | None = GEN4_X16,
        port_type: PortType | None = None,
        physfn: PciFunction | None = None,
    ) -> PciFunction:
        addr = Bdf.parse(bdf)
        if addr in self.functions:
            raise ValueError(f"PCI function {addr} already exists")
        up = self._parent(parent)
        root = up if isinstance(up, RootHandle) else up.root
        if addr.domain != root.domain:
            raise ValueError(f"{addr} is not in domain {root.domain:04x} of {root.name}")
        if physfn is None:
            self._claim_bus(up, addr)
        if port_type is None:
            port_type = self._port_type(up, class_code)
        if numa is None:
            numa = up.numa
        group: int | None
        if iommu_group == AUTO_GROUP:
            group = self._new_group() if self.iommu else None
        else:
            group = iommu_group
        fn = PciFunction(
            bdf=addr,
            sysfs=up.sysfs / str(addr),
            parent=up,
            root=root,
            vendor=vendor,
            device=device,
            class_code=class_code,
            subsystem=subsystem or (0, 0),
            revision=revision,
            numa=numa,
            driver=None,
            iommu_group=group,
            port_type=port_type,
            link=link,
            physfn=physfn.bdf if physfn else None,
        )
        self.functions[addr] = fn
        self._write_function(fn)
        if group is not None:
            self.set_iommu_group(fn.bdf, group)
        if driver:
            self.bind(fn.bdf, driver)
        return fn

    def _port_type(self, up: RootHandle | PciFunction, class_code: int) -> PortType:
        if (class_code >> 8) != (CLASS_PCI_BRIDGE >> 8):
            return PortType.RC_INTEGRATED if isinstance(up, RootHandle) else PortType.ENDPOINT
        if isinstance(up, RootHandle):
            return PortType.ROOT_PORT
        if up.port_type == PortType.UPSTREAM:
            return PortType.DOWNSTREAM
        return PortType.UPSTREAM

    def _claim_bus(self, up: RootHandle | PciFunction, addr: Bdf) -> None:
        if isinstance(up, RootHandle):
            if addr.bus != up.bus:
                raise ValueError(f"{addr} cannot sit directly on root bus {up.bus:02x}")
            return
        if up.secondary_bus is None:
            up.secondary_bus = addr.bus
            self._pci_bus_dir(up.sysfs, addr.domain, addr.bus, up.numa)
        elif up.secondary_bus != addr.bus:
            raise ValueError(f"{addr} is not on bus {up.secondary_bus:02x} behind bridge {up.bdf}")
        node: RootHandle | PciFunction = up
        while isinstance(node, PciFunction):
            if node.subordinate_bus is None or node.subordinate_bus < addr.bus:
                node.subordinate_bus = addr.bus
                self._write_bridge_buses(node)
            node = node.parent

    def _new_group(self) -> int:
        group = self._next_group
        self._next_group += 1
        return group

    def _write_bridge_buses(self, fn: PciFunction) -> None:
        self.w.attr(fn.sysfs / "secondary_bus_number", fn.secondary_bus or 0)
        self.w.attr(fn.sysfs / "subordinate_bus_number", fn.subordinate_bus or 0)
        self.w.write(fn.sysfs / "config", config_space(fn))

    def _write_function(self, fn: PciFunction) -> None:
        w, d = self.w, fn.sysfs
        w.attr(d / "vendor", f"0x{fn.vendor:04x}")
        w.attr(d / "device", f"0x{fn.device:04x}")
        w.attr(d / "class", f"0x{fn.class_code:06x}")
        w.attr(d / "subsystem_vendor", f"0x{fn.subsystem[0]:04x}")
        w.attr(d / "subsystem_device", f"0x{fn.subsystem[1]:04x}")
        w.attr(d / "revision", f"0x{fn.revision:02x}")
        w.attr(d / "numa_node", fn.numa)
        cpus = self.numa.node_cpus(fn.numa)
        w.attr(d / "local_cpulist", format_cpulist(cpus))
        w.attr(d / "local_cpus", format_cpumask(cpus, self.numa.nr_cpus))
        w.attr(d / "enable", 1)
        w.attr(d / "driver_override", "(null)")
        w.attr(d / "modalias", modalias(fn))
        w.attr(d / "irq", 0)
        w.write(d / "reset")
        w.write(d / "remove")
        w.write(d / "rescan")
        w.write(d / "config", config_space(fn))
        if fn.link is not None:
            w.attr(d / "current_link_speed", fn.link[0])
            w.attr(d / "current_link_width", fn.link[1])
            w.attr(d / "max_link_speed", fn.link[0])
            w.attr(d / "max_link_width", fn.link[1])
        if fn.is_bridge:
            self._write_bridge_buses(fn)
        self._write_uevent(fn)
        w.symlink(d / "subsystem", PCI_BUS)
        w.symlink(f"{PCI_BUS}/devices/{fn.bdf}", d)

    def _write_uevent(self, fn: PciFunction) -> None:
        lines = []
        if fn.driver:
            lines.append(f"DRIVER={fn.driver}")
        lines += [
            f"PCI_CLASS={fn.class_code:X}",
            f"PCI_ID={fn.vendor:04X}:{fn.device:04X}",
            f"PCI_SUBSYS_ID={fn.subsystem[0]:04X}:{fn.subsystem[1]:04X}",
            f"PCI_SLOT_NAME={fn.bdf}",
            f"MODALIAS={modalias(fn)}",
        ]
        self.w.write(fn.sysfs / "uevent", "\n".join(lines) + "\n")

    # -- drivers and IOMMU groups -------------------------------------------------------------

    def driver_dir(self, driver: str) -> PurePosixPath:
        d = PurePosixPath(PCI_BUS) / "drivers" / driver
        if not self.w.host(d / "bind").exists():
            for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
                self.w.write(d / name)
        return d

    def bind(self, bdf: str | Bdf, driver: str) -> None:
        """Bind a function to ``driver``: both the ``driver`` link and the driver's back link."""
        fn = self.get(bdf)
        if fn.driver:
            self.unbind(fn.bdf)
        d = self.driver_dir(driver)
        self.w.symlink(fn.sysfs / "driver", d)
        self.w.symlink(d / str(fn.bdf), fn.sysfs)
        fn.driver = driver
        self._write_uevent(fn)

    def unbind(self, bdf: str | Bdf) -> None:
        fn = self.get(bdf)
        if not fn.driver:
            return
        d = PurePosixPath(PCI_BUS) / "drivers" / fn.driver
        for p in (self.w.host(fn.sysfs / "driver"), self.w.host(d / str(fn.bdf))):
            if p.is_symlink():
                p.unlink()
        fn.driver = None
        self._write_uevent(fn)

    def set_iommu_group(self, bdf: str | Bdf, group: int) -> None:
        fn = self.get(bdf)
        g = PurePosixPath(IOMMU_GROUPS) / str(group)
        if not self.w.host(g / "type").exists():
            self.w.attr(g / "type", "DMA-FQ")
            self.w.write(g / "reserved_regions", "0x00000000fee00000 0x00000000feefffff msi\n")
        self.w.symlink(g / "devices" / str(fn.bdf), fn.sysfs)
        self.w.symlink(fn.sysfs / "iommu_group", g)
        fn.iommu_group = group
        self._next_group = max(self._next_group, group + 1)

    # -- SR-IOV -------------------------------------------------------------------------------

    def sriov(
        self,
        pf_bdf: str | Bdf,
        total: int,
        num: int,
        vf_device: int,
        vf_driver: str | None,
        *,
        offset: int = 1,
        stride: int = 1,
    ) -> list[PciFunction]:
        """Give a PF SR-IOV capability and create ``num`` of its ``total`` VFs.

        VF *n* (from 0) sits at routing id ``PF + offset + n * stride``, beside the PF under the
        same parent, with a ``physfn`` link back; the PF gets ``virtfn<n>`` links.
        """
        if not 0 <= num <= total:
            raise ValueError(f"sriov: need 0 <= num ({num}) <= total ({total})")
        pf = self.get(pf_bdf)
        w, d = self.w, pf.sysfs
        w.attr(d / "sriov_totalvfs", total)
        w.attr(d / "sriov_numvfs", num)
        w.attr(d / "sriov_offset", offset)
        w.attr(d / "sriov_stride", stride)
        w.attr(d / "sriov_vf_device", f"{vf_device:x}")
        w.attr(d / "sriov_drivers_autoprobe", 1)
        vfs: list[PciFunction] = []
        for n in range(num):
            addr = Bdf.from_rid(pf.bdf.domain, pf.bdf.rid + offset + n * stride)
            vf = self.add(
                pf.parent,
                addr,
                pf.vendor,
                vf_device,
                pf.class_code,
                driver=vf_driver,
                numa=pf.numa,
                subsystem=pf.subsystem,
                revision=pf.revision,
                link=pf.link,
                port_type=PortType.ENDPOINT,
                physfn=pf,
            )
            w.symlink(vf.sysfs / "physfn", pf.sysfs)
            w.symlink(d / f"virtfn{n}", vf.sysfs)
            pf.vfs.append(vf.bdf)
            vfs.append(vf)
        return vfs
