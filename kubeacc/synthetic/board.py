"""Motherboard pieces shared by the server profiles: host bridge, BMC graphics, onboard NIC,
NVMe drives, and the PCIe-switch chains accelerators sit behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeacc.synthetic.pci import CLASS_HOST_BRIDGE, GEN3_X4, GEN4_X4, GEN5_X16, PciFunction
from kubeacc.synthetic.tree import HostBuilder

INTEL = 0x8086
BROADCOM_PEX = (0x1000, 0xC030)
INTEL_ROOT_PORT = (INTEL, 0x352A)
INTEL_HOST_BRIDGE = (INTEL, 0x0958)

CLASS_VGA = 0x030000
CLASS_NVME = 0x010802
CLASS_ETHERNET = 0x020000


def bdf(bus: int, dev: int = 0, fn: int = 0, domain: int = 0) -> str:
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def host_bridge(b: HostBuilder, numa: int, device: tuple[int, int] = INTEL_HOST_BRIDGE) -> None:
    """Root complex ``pci0000:00`` with the host bridge at ``0000:00:00.0``."""
    root = b.root_complex(0, 0x00, numa=numa)
    b.function(root, bdf(0), device[0], device[1], CLASS_HOST_BRIDGE, link=None)


def bmc_vga(
    b: HostBuilder, port_bdf: str, bridge_bus: int, card: int, root_port: tuple[int, int]
) -> None:
    """ASPEED BMC: root port -> AST PCIe-to-PCI bridge -> VGA function (driver ``ast``)."""
    root = b.root_complex(0, 0x00)
    port = b.bridge(root, port_bdf, *root_port, link=("5.0 GT/s PCIe", 1))
    ast_bridge = b.bridge(port, bdf(bridge_bus), 0x1A03, 0x1150, driver=None, link=None)
    vga = bdf(bridge_bus + 1)
    b.function(
        ast_bridge,
        vga,
        0x1A03,
        0x2000,
        CLASS_VGA,
        driver="ast",
        subsystem=(0x1A03, 0x2000),
        revision=0x52,
        link=None,
    )
    b.drm(vga, card)


def onboard_nic(
    b: HostBuilder,
    port_bdf: str,
    bus: int,
    ifname: str,
    *,
    root_port: tuple[int, int],
    device: tuple[int, int] = (0x14E4, 0x165F),
    driver: str = "tg3",
) -> None:
    """A plain onboard Ethernet port: no SR-IOV, no RDMA."""
    root = b.root_complex(0, 0x00)
    port = b.bridge(root, port_bdf, *root_port, link=("5.0 GT/s PCIe", 1))
    b.function(
        port,
        bdf(bus),
        device[0],
        device[1],
        CLASS_ETHERNET,
        driver=driver,
        subsystem=device,
        link=("5.0 GT/s PCIe", 1),
    )
    b.netdev(bdf(bus), ifname, speed=1000)


def nvme_drives(
    b: HostBuilder,
    root_bus: int,
    numa: int,
    count: int,
    *,
    first_index: int = 0,
    root_port: tuple[int, int] = INTEL_ROOT_PORT,
) -> None:
    """``count`` Samsung NVMe drives, each behind its own root port on one root complex."""
    root = b.root_complex(0, root_bus, numa=numa)
    for i in range(count):
        port = b.bridge(root, bdf(root_bus, 2 + i), *root_port, link=GEN4_X4)
        drive = bdf(root_bus + 1 + i)
        b.function(
            port,
            drive,
            0x144D,
            0xA80A,
            CLASS_NVME,
            driver="nvme",
            subsystem=(0x144D, 0xA801),
            link=GEN4_X4,
        )
        b.nvme(drive, first_index + i)


@dataclass
class SwitchChain:
    """Root complex -> root port -> switch upstream port -> downstream ports."""

    root_bus: int
    downstream: list[PciFunction]

    def slot_bus(self, port: int) -> int:
        """The bus of the endpoint behind downstream port ``port``."""
        return self.root_bus + 3 + port


def switch_chain(
    b: HostBuilder,
    root_bus: int,
    numa: int,
    ports: int,
    *,
    root_port: tuple[int, int] = INTEL_ROOT_PORT,
    switch: tuple[int, int] = BROADCOM_PEX,
    link: tuple[str, int] = GEN5_X16,
) -> SwitchChain:
    """Buses: root R, upstream port on R+1, downstream ports on R+2 (devices 08, 0c, 10, ...),
    endpoints on R+3, R+4, ... in port order. Bridges bind to ``pcieport``."""
    root = b.root_complex(0, root_bus, numa=numa)
    rp = b.bridge(root, bdf(root_bus, 2), *root_port, link=link)
    up = b.bridge(rp, bdf(root_bus + 1), *switch, link=link)
    downs = [
        b.bridge(up, bdf(root_bus + 2, 0x08 + 4 * i), *switch, link=link) for i in range(ports)
    ]
    return SwitchChain(root_bus, downs)


def single_slot(
    b: HostBuilder,
    root_bus: int,
    numa: int,
    *,
    root_port: tuple[int, int] = INTEL_ROOT_PORT,
    link: tuple[str, int] = GEN3_X4,
) -> PciFunction:
    """Root complex with one root port; the endpoint goes on bus ``root_bus + 1``."""
    root = b.root_complex(0, root_bus, numa=numa)
    return b.bridge(root, bdf(root_bus, 2), *root_port, link=link)
