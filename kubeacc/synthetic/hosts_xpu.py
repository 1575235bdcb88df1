"""``kunlun-xpu``: 8 Baidu KunLun XPUs behind two PCIe switches, plus one RoCE NIC."""

from __future__ import annotations

from kubeacc.synthetic import board
from kubeacc.synthetic.board import bdf
from kubeacc.synthetic.pci import GEN4_X16
from kubeacc.synthetic.system import numa_distances, split_cpulists
from kubeacc.synthetic.tree import HostBuilder

BAIDU = 0x1D22
KUNLUN_R200 = 0x3684
CLASS_ACCEL = 0x120000


def kunlun_xpu(b: HostBuilder) -> None:
    """Switch 0 (NUMA 0): XPUs 0-3 and a ConnectX-6 Dx (RoCE); switch 1 (NUMA 1): XPUs 4-7.

    Device nodes: ``/dev/xpu<N>`` per XPU and one ``/dev/xpuctrl``.
    """
    b.numa(split_cpulists(28, 2), numa_distances(2))
    b.identity("kunlun-01", "Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz")
    board.host_bridge(b, numa=0)
    board.bmc_vga(b, bdf(0, 0x1C), 0x01, card=0, root_port=board.INTEL_ROOT_PORT)

    xpu = 0
    for root_bus, numa, ports in ((0x3A, 0, 5), (0xB0, 1, 4)):
        chain = board.switch_chain(b, root_bus, numa, ports, link=GEN4_X16)
        for port in range(4):
            addr = bdf(chain.slot_bus(port))
            b.function(
                chain.downstream[port],
                addr,
                BAIDU,
                KUNLUN_R200,
                CLASS_ACCEL,
                driver="kunlun",
                subsystem=(BAIDU, 0x0001),
                revision=0x01,
                link=GEN4_X16,
            )
            b.dev_node(f"/dev/xpu{xpu}")
            xpu += 1
        if ports == 5:
            nic = bdf(chain.slot_bus(4))
            b.function(
                chain.downstream[4],
                nic,
                0x15B3,
                0x101D,
                0x020000,
                driver="mlx5_core",
                subsystem=(0x15B3, 0x0016),
                link=GEN4_X16,
            )
            b.netdev(nic, "ens1f0np0", mtu=9000, speed=100000)
            b.rdma(
                nic, "mlx5_0", link_layer="Ethernet", rate="100 Gb/sec (2X HDR)", hca_type="MT4125"
            )
    b.dev_node("/dev/xpuctrl")
    b.pci_ids()
