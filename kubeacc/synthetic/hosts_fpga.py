"""FPGA host profiles: ``intel-fpga-dfl``, ``intel-fpga-opae`` and ``aws-f1``."""

from __future__ import annotations

from dataclasses import dataclass

from kubeacc.synthetic import board, fpga
from kubeacc.synthetic.board import bdf
from kubeacc.synthetic.pci import GEN3_X16
from kubeacc.synthetic.system import numa_distances, split_cpulists
from kubeacc.synthetic.tree import HostBuilder

INTEL = 0x8086
CLASS_ACCEL = 0x120000
CLASS_MEMORY_OTHER = 0x058000

#: AFU id of the native loopback ("nlb0") accelerator function shipped for these cards.
NLB0_AFU_ID = "d8424dc4a4a3c413f89e433683f9040b"


@dataclass(frozen=True)
class IntelCard:
    device: int
    compat_id: str  # the FIM interface id of the loaded static region
    bitstream_id: int


PAC_N3000 = IntelCard(0x0B30, "69528db6eb31577a8c3668f9faa081f6", 0x23000410010309)
PAC_ARRIA10 = IntelCard(0x09C4, "9926ab6d6c925a68aabca7d84c545738", 0x1200001203)

#: Card 0 has an AFU loaded, card 1 has none (all-zero afu_id).
CARDS = ((PAC_N3000, NLB0_AFU_ID), (PAC_ARRIA10, fpga.ZERO_ID))


def _intel_card(b: HostBuilder, root_bus: int, numa: int, card: IntelCard, driver: str) -> str:
    port = board.single_slot(b, root_bus, numa, link=GEN3_X16)
    addr = bdf(root_bus + 1)
    b.function(
        port,
        addr,
        INTEL,
        card.device,
        CLASS_ACCEL,
        driver=driver,
        subsystem=(INTEL, card.device),
        link=GEN3_X16,
    )
    return addr


def dfl_cards(
    b: HostBuilder,
    roots: list[tuple[int, int]],
    cards: tuple[tuple[IntelCard, str], ...] = CARDS,
) -> list[fpga.DflCard]:
    """One card per (root bus, NUMA node), in-tree DFL driver, following ``cards``."""
    out = []
    for (root_bus, numa), (card, afu) in zip(roots, cards, strict=False):
        addr = _intel_card(b, root_bus, numa, card, "dfl-pci")
        out.append(
            b.dfl_fpga(addr, afu_id=afu, compat_id=card.compat_id, bitstream_id=card.bitstream_id)
        )
    return out


def _fpga_server(b: HostBuilder, hostname: str) -> None:
    b.numa(split_cpulists(20, 2), numa_distances(2))
    b.identity(hostname, "Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz")
    board.host_bridge(b, numa=0)
    board.bmc_vga(b, bdf(0, 0x1C), 0x01, card=0, root_port=board.INTEL_ROOT_PORT)
    board.onboard_nic(b, bdf(0, 0x1C, 4), 0x03, "eno1", root_port=board.INTEL_ROOT_PORT)


def intel_fpga_dfl(b: HostBuilder) -> None:
    """2 Intel FPGA cards (PAC N3000 with nlb0 loaded, PAC Arria 10 empty), DFL driver."""
    _fpga_server(b, "fpga-dfl-01")
    dfl_cards(b, [(0x3A, 0), (0xAE, 1)])
    b.pci_ids()


def intel_fpga_server(
    b: HostBuilder, hostname: str, cards: tuple[tuple[IntelCard, str], ...]
) -> None:
    """A server with the given Intel cards (and AFU ids) under the DFL driver, at most two:
    for tests whose nodes differ in their cards."""
    _fpga_server(b, hostname)
    dfl_cards(b, [(0x3A, 0), (0xAE, 1)], cards)
    b.pci_ids()


def intel_fpga_opae(b: HostBuilder) -> None:
    """The same two cards under the out-of-tree OPAE driver (``intel-fpga-pci``)."""
    _fpga_server(b, "fpga-opae-01")
    for (root_bus, numa), (card, afu) in zip(((0x3A, 0), (0xAE, 1)), CARDS, strict=True):
        addr = _intel_card(b, root_bus, numa, card, "intel-fpga-pci")
        b.opae_fpga(addr, afu_id=afu, interface_id=card.compat_id, bitstream_id=card.bitstream_id)
    b.pci_ids()


AMAZON = 0x1D0F


def aws_f1(b: HostBuilder) -> None:
    """An f1.4xlarge-like VM: 2 FPGA slots (application + management PF each), ENA, NVMe.

    Flat VM bus, no IOMMU groups. ENA, NVMe and the host bridge report NUMA node -1.
    """
    b.numa(["0-15"], [[10]])
    b.identity(
        "ip-172-31-20-11",
        "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz",
        kernel="6.1.94-99.176.amzn2023.x86_64",
    )
    root = b.root_complex(0, 0x00, numa=-1)
    b.function(root, bdf(0), INTEL, 0x1237, 0x060000, link=None)
    b.function(root, bdf(0, 0x03), AMAZON, 0xEC20, 0x020000, driver="ena", link=None)
    b.netdev(bdf(0, 0x03), "ens5", address="0a:1f:6c:23:4b:9d", mtu=9001, speed=-1)
    b.function(root, bdf(0, 0x04), AMAZON, 0x8061, 0x010802, driver="nvme", link=None)
    b.nvme(bdf(0, 0x04), 0, model="Amazon Elastic Block Store")
    for slot, dev in enumerate((0x0F, 0x11)):
        app, mgmt = bdf(0, dev, 0), bdf(0, dev, 1)
        b.function(
            root,
            app,
            AMAZON,
            0xF000,
            CLASS_MEMORY_OTHER,
            driver="xocl",
            numa=0,
            subsystem=(0xFEDD, 0x1D51),
            link=None,
        )
        b.function(
            root,
            mgmt,
            AMAZON,
            0xF001,
            CLASS_MEMORY_OTHER,
            numa=0,
            subsystem=(0xFEDD, 0x1D51),
            link=None,
        )
        b.drm(app, slot, slot)
    b.pci_ids()


def intel_pac_opae(b: HostBuilder, hostname: str = "fpga-pac-01") -> str:
    """One PAC Arria 10 under the OPAE driver, its PR region empty (all-zero AFU), with the
    SR-IOV capability the real card's PF has (one VF possible, none made): the card OpenStack
    Cyborg's Intel FPGA driver discovers. Returns the card's PCI address."""
    _fpga_server(b, hostname)
    addr = _intel_card(b, 0x3A, 0, PAC_ARRIA10, "intel-fpga-pci")
    b.sriov(addr, 1, 0, PAC_ARRIA10.device + 1, None)
    b.opae_fpga(
        addr,
        afu_id=fpga.ZERO_ID,
        interface_id=PAC_ARRIA10.compat_id,
        bitstream_id=PAC_ARRIA10.bitstream_id,
    )
    b.pci_ids()
    return addr
