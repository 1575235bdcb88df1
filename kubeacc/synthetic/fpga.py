"""Intel FPGA card layouts: the in-tree DFL driver and the out-of-tree OPAE driver.

DFL (``dfl-pci``), as the kernel builds it::

    <pcidev>/fpga_region/region<N>/                       the card's FPGA region
        dfl-fme.<K>/   bitstream_id bitstream_metadata ports_num dev
            dfl-fme-mgr.<K>/fpga_manager/fpga<X>/
            dfl-fme-br.<B>.auto/fpga_bridge/br<B>/
            dfl-fme-region.<B>/fpga_region/region<R>/compat_id   (the PR region)
        dfl-port.<K>/  afu_id dev

OPAE (``intel-fpga-pci``)::

    <pcidev>/fpga/intel-fpga-dev.<N>/
        intel-fpga-fme.<N>/  bitstream_id bitstream_metadata ports_num pr/interface_id
        intel-fpga-port.<N>/ afu_id

Region, FME, bridge and manager numbers are host-wide counters, as the kernel's IDAs are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from kubeacc.synthetic.fsw import TreeWriter
from kubeacc.synthetic.pci import PciFunction

ZERO_ID = "0" * 32
PLATFORM = "/sys/bus/platform"


def _check_id(value: str) -> str:
    if len(value) != 32 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"FPGA ids are 32 lower-case hex digits without dashes: {value!r}")
    return value


@dataclass(frozen=True)
class DflCard:
    """The numbers one DFL card got; ``region`` is the card region, ``pr_region`` the PR one."""

    region: int
    fme: int
    pr_region: int
    bridge: int
    manager: int

    @property
    def fme_dev(self) -> str:
        return f"/dev/dfl-fme.{self.fme}"

    @property
    def port_dev(self) -> str:
        return f"/dev/dfl-port.{self.fme}"


@dataclass(frozen=True)
class OpaeCard:
    index: int

    @property
    def fme_dev(self) -> str:
        return f"/dev/intel-fpga-fme.{self.index}"

    @property
    def port_dev(self) -> str:
        return f"/dev/intel-fpga-port.{self.index}"


class FpgaWriter:
    """Keeps the host-wide counters and writes FPGA class devices under PCI functions."""

    def __init__(self, w: TreeWriter) -> None:
        self.w = w
        self.regions = 0
        self.fmes = 0
        self.bridges = 0
        self.managers = 0
        self.opae_cards = 0
        self.char_minor = 0

    def _platform(self, d: PurePosixPath, driver: str | None) -> None:
        """Register a platform device dir in ``/sys/bus/platform`` (and bind it)."""
        self.w.symlink(f"{PLATFORM}/devices/{d.name}", d)
        if driver:
            drv = PurePosixPath(PLATFORM) / "drivers" / driver
            self.w.write(drv / "bind")
            self.w.write(drv / "unbind")
            self.w.symlink(d / "driver", drv)
            self.w.symlink(drv / d.name, d)

    def _chardev(self, d: PurePosixPath, major: int) -> None:
        self.w.attr(d / "dev", f"{major}:{self.char_minor}")
        self.char_minor += 1

    def dfl(
        self,
        fn: PciFunction,
        *,
        afu_id: str,
        compat_id: str,
        bitstream_id: int,
        bitstream_metadata: int,
    ) -> DflCard:
        w = self.w
        card = DflCard(
            region=self.regions,
            fme=self.fmes,
            pr_region=self.regions + 1,
            bridge=self.bridges,
            manager=self.managers,
        )
        self.regions += 2
        self.fmes += 1
        self.bridges += 1
        self.managers += 1

        region = fn.sysfs / "fpga_region" / f"region{card.region}"
        w.symlink(region / "device", fn.sysfs)
        w.symlink(f"/sys/class/fpga_region/region{card.region}", region)

        fme = region / f"dfl-fme.{card.fme}"
        w.attr(fme / "bitstream_id", f"0x{bitstream_id:x}")
        w.attr(fme / "bitstream_metadata", f"0x{bitstream_metadata:x}")
        w.attr(fme / "ports_num", 1)
        w.attr(fme / "socket_id", 0)
        w.attr(fme / "fabric_version", 0)
        w.attr(fme / "cache_size", 0)
        self._chardev(fme, 240)
        self._platform(fme, "dfl-fme")
        w.dev_node(card.fme_dev)

        mgr = fme / f"dfl-fme-mgr.{card.fme}"
        mgr_cls = mgr / "fpga_manager" / f"fpga{card.manager}"
        w.attr(mgr_cls / "name", "DFL FME FPGA Manager")
        w.attr(mgr_cls / "state", "operating")
        w.symlink(f"/sys/class/fpga_manager/fpga{card.manager}", mgr_cls)
        self._platform(mgr, "dfl-fme-mgr")

        br = fme / f"dfl-fme-br.{card.bridge}.auto"
        br_cls = br / "fpga_bridge" / f"br{card.bridge}"
        w.attr(br_cls / "name", "DFL FPGA FME Bridge")
        w.attr(br_cls / "state", "enabled")
        w.symlink(f"/sys/class/fpga_bridge/br{card.bridge}", br_cls)
        self._platform(br, "dfl-fme-bridge")

        pr = fme / f"dfl-fme-region.{card.bridge}"
        pr_cls = pr / "fpga_region" / f"region{card.pr_region}"
        w.attr(pr_cls / "compat_id", _check_id(compat_id))
        w.symlink(f"/sys/class/fpga_region/region{card.pr_region}", pr_cls)
        self._platform(pr, "dfl-fme-region")

        port = region / f"dfl-port.{card.fme}"
        w.attr(port / "afu_id", _check_id(afu_id))
        w.attr(port / "id", 0)
        w.attr(port / "power_state", 0)
        w.attr(port / "ltr", 0)
        self._chardev(port, 241)
        self._platform(port, "dfl-port")
        w.dev_node(card.port_dev)
        return card

    def opae(
        self,
        fn: PciFunction,
        *,
        afu_id: str,
        interface_id: str,
        bitstream_id: int,
        bitstream_metadata: int,
    ) -> OpaeCard:
        w = self.w
        card = OpaeCard(self.opae_cards)
        self.opae_cards += 1
        n = card.index
        dev = fn.sysfs / "fpga" / f"intel-fpga-dev.{n}"
        w.symlink(dev / "device", fn.sysfs)
        w.symlink(f"/sys/class/fpga/intel-fpga-dev.{n}", dev)

        fme = dev / f"intel-fpga-fme.{n}"
        w.attr(fme / "bitstream_id", f"0x{bitstream_id:016x}")
        w.attr(fme / "bitstream_metadata", f"0x{bitstream_metadata:016x}")
        w.attr(fme / "ports_num", 1)
        w.attr(fme / "socket_id", 0)
        w.attr(fme / "pr" / "interface_id", _check_id(interface_id))
        self._chardev(fme, 242)
        self._platform(fme, "intel-fpga-fme")
        w.dev_node(card.fme_dev)

        port = dev / f"intel-fpga-port.{n}"
        w.attr(port / "afu_id", _check_id(afu_id))
        w.attr(port / "id", 0)
        self._chardev(port, 243)
        self._platform(port, "intel-fpga-port")
        w.dev_node(card.port_dev)
        return card
