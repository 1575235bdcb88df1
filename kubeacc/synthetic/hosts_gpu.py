"""GPU server profiles: ``dgx-h100``, ``large-mixed``, ``amd-gpu`` and ``edge-mixed``."""

from __future__ import annotations

from dataclasses import dataclass

from kubeacc.synthetic import board, ids
from kubeacc.synthetic.amd import KfdGpu
from kubeacc.synthetic.board import bdf
from kubeacc.synthetic.hosts_fpga import dfl_cards
from kubeacc.synthetic.nvml import MigDevice, NvLink, NvmlGpu
from kubeacc.synthetic.pci import GEN3_X16, GEN4_X16, GEN5_X16, Bdf, Parent
from kubeacc.synthetic.system import numa_distances, split_cpulists
from kubeacc.synthetic.tree import HostBuilder

NVIDIA = 0x10DE
MELLANOX = 0x15B3
CLASS_3D = 0x030200
CLASS_DISPLAY_OTHER = 0x038000
CLASS_INFINIBAND = 0x020700
CLASS_ETHERNET = 0x020000
CLASS_BRIDGE_OTHER = 0x068000
CLASS_ACCEL = 0x120000

DRIVER_VERSION = "550.90.07"
GIB = 1 << 30


@dataclass(frozen=True)
class NvidiaModel:
    device: int
    subsystem: tuple[int, int]
    name: str
    memory: int
    cc: tuple[int, int]
    power_mw: int
    link: tuple[str, int]


H100_SXM = NvidiaModel(
    0x2330, (NVIDIA, 0x16C1), "NVIDIA H100 80GB HBM3", 85520809984, (9, 0), 700000, GEN5_X16
)
L4 = NvidiaModel(0x27B8, (NVIDIA, 0x16CA), "NVIDIA L4", 24152899584, (8, 9), 72000, GEN4_X16)


def nvidia_gpu(
    b: HostBuilder, parent: Parent, addr: str, model: NvidiaModel, *, index: int, numa: int
) -> NvmlGpu:
    """One NVIDIA GPU: PCI function, ``/proc/driver/nvidia``, ``/dev/nvidiaN``, NVML entry."""
    b.function(
        parent,
        addr,
        NVIDIA,
        model.device,
        CLASS_3D,
        driver="nvidia",
        numa=numa,
        subsystem=model.subsystem,
        revision=0xA1,
        link=model.link,
    )
    uuid = "GPU-" + ids.make_uuid(b.seed, f"gpu/{addr}")
    b.proc_nvidia(addr, model.name, uuid, index)
    return NvmlGpu(
        index=index,
        bus_id=Bdf.parse(addr).nvml(),
        uuid=uuid,
        name=model.name,
        memory_total=model.memory,
        serial=ids.serial(b.seed, f"gpu-serial/{addr}"),
        minor_number=index,
        numa_node=numa,
        pci_device_id=(model.device << 16) | NVIDIA,
        compute_capability=model.cc,
        power_limit_mw=model.power_mw,
        temperature=30 + index % 7,
    )


def nvswitch_links(gpus: list[NvmlGpu]) -> None:
    """18 NVLinks per GPU over the 7 peers of an 8-GPU NVSwitch system.

    Every pair is connected. Peers whose indexes differ in one bit get 2 links, the other four
    peers 3 links (2*3 + 3*4 = 18): symmetric, so link counts agree from both ends.
    """
    for g in gpus:
        links: list[NvLink] = []
        for peer in gpus:
            if peer.index == g.index:
                continue
            count = 2 if (g.index ^ peer.index).bit_count() == 1 else 3
            for _ in range(count):
                links.append(NvLink(link=len(links), remote_bus_id=peer.bus_id))
        g.nvlinks = links


def enable_mig(b: HostBuilder, gpu: NvmlGpu) -> None:
    """MIG on one H100: 3g.40gb + 2 x 2g.20gb (7 compute slices, 8 memory slices)."""
    layout = [("3g.40gb", 42144366592), ("2g.20gb", 21072183296), ("2g.20gb", 21072183296)]
    gpu.mig_mode = 1
    gpu.mig_devices = [
        MigDevice(
            index=i,
            uuid="MIG-" + ids.make_uuid(b.seed, f"mig/{gpu.bus_id}/{i}"),
            profile=profile,
            memory_total=mem,
            gpu_instance_id=[2, 3, 5][i],
            compute_instance_id=0,
            placement=[(4, 4), (0, 2), (2, 2)][i],
        )
        for i, (profile, mem) in enumerate(layout)
    ]
    b.mig_caps(gpu.minor_number, [m.gpu_instance_id for m in gpu.mig_devices])


def connectx7(b: HostBuilder, parent: Parent, addr: str, index: int, vfs: int) -> None:
    """ConnectX-7 in InfiniBand mode: IPoIB netdev ``ibp<bus>s<slot>`` (with an IPv4 and an
    IPv6 address of the host's storage/compute fabric), ``mlx5_<index>``."""
    b.function(
        parent,
        addr,
        MELLANOX,
        0x1021,
        CLASS_INFINIBAND,
        driver="mlx5_core",
        subsystem=(MELLANOX, 0x0041),
        link=GEN5_X16,
    )
    a = Bdf.parse(addr)
    ips = (f"10.{100 + index}.0.11/16", f"fd00:ac:{index:x}::11/64")
    b.netdev(addr, f"ibp{a.bus}s{a.device}", mtu=4092, speed=400000, infiniband=True, ips=ips)
    b.rdma(addr, f"mlx5_{index}")
    if vfs:
        b.sriov(addr, total=16, num=vfs, vf_device_id=0x101E, vf_driver="mlx5_core")


# -- dgx-h100 / large-mixed -----------------------------------------------------------------

#: Root buses of the four GPU/NIC complexes, with their NUMA nodes.
DGX_ROOTS = ((0x18, 0), (0x3A, 0), (0x9A, 1), (0xBA, 1))


def _dgx(b: HostBuilder, hostname: str) -> list[NvmlGpu]:
    b.numa(split_cpulists(56, 2), numa_distances(2))
    b.identity(hostname, "Intel(R) Xeon(R) Platinum 8480C")
    b.nvidia_version(DRIVER_VERSION)

    board.host_bridge(b, numa=0)
    board.bmc_vga(b, bdf(0, 0x1C), 0x01, card=0, root_port=board.INTEL_ROOT_PORT)
    board.onboard_nic(b, bdf(0, 0x1C, 4), 0x03, "eno1", root_port=board.INTEL_ROOT_PORT)
    board.nvme_drives(b, 0x5C, numa=0, count=2)

    gpus: list[NvmlGpu] = []
    nic = 0
    for root_bus, numa in DGX_ROOTS:
        chain = board.switch_chain(b, root_bus, numa, 4)
        for port, kind in enumerate(("gpu", "nic", "gpu", "nic")):
            addr = bdf(chain.slot_bus(port))
            if kind == "gpu":
                gpus.append(
                    nvidia_gpu(
                        b, chain.downstream[port], addr, H100_SXM, index=len(gpus), numa=numa
                    )
                )
            else:
                connectx7(b, chain.downstream[port], addr, nic, vfs=8)
                nic += 1

    # The four NVSwitch chips show up as NVIDIA "bridge, other" functions: not GPUs.
    chain = board.switch_chain(b, 0xD8, 1, 4)
    for port in range(4):
        b.function(
            chain.downstream[port],
            bdf(chain.slot_bus(port)),
            NVIDIA,
            0x22A3,
            CLASS_BRIDGE_OTHER,
            driver="nvidia-nvswitch",
            revision=0xA1,
            link=GEN4_X16,
        )

    nvswitch_links(gpus)
    enable_mig(b, gpus[7])
    return gpus


def dgx_h100(b: HostBuilder) -> None:
    """8 H100 SXM + 8 ConnectX-7 (8 VFs each), 2 NUMA nodes, 4 switched root complexes."""
    gpus = _dgx(b, "dgx-h100-01")
    b.nvml(gpus)
    b.pci_ids()


def large_mixed(b: HostBuilder) -> None:
    """The discovery benchmark's large node: ``dgx-h100`` plus two Intel DFL FPGA cards."""
    gpus = _dgx(b, "large-mixed-01")
    dfl_cards(b, [(0x6A, 0), (0xE8, 1)])
    b.nvml(gpus)
    b.pci_ids()


# -- amd-gpu ----------------------------------------------------------------------------------

AMD = 0x1002
AMD_CPU = 0x1022
MI210_VRAM = 68702699520


def amd_gpu(b: HostBuilder) -> None:
    """4 AMD Instinct MI210 + 1 Intel Data Center GPU Flex 170 on a 2-socket EPYC host."""
    b.numa(split_cpulists(64, 2), numa_distances(2, remote=32))
    b.identity("amd-gpu-01", "AMD EPYC 7763 64-Core Processor", cpu_vendor="AuthenticAMD")
    host = (AMD_CPU, 0x1480)
    gpp = (AMD_CPU, 0x1483)
    board.host_bridge(b, numa=0, device=host)
    board.bmc_vga(b, bdf(0, 0x07, 1), 0x01, card=0, root_port=gpp)
    board.onboard_nic(b, bdf(0, 0x01, 2), 0x03, "eno1", root_port=gpp)

    kfd: list[KfdGpu] = []
    for i, (root_bus, numa) in enumerate(((0x20, 0), (0x40, 0), (0xA0, 1), (0xC0, 1))):
        root = b.root_complex(0, root_bus, numa=numa)
        b.function(root, bdf(root_bus), *host, 0x060000, link=None)
        rp = b.bridge(root, bdf(root_bus, 0x01, 1), *gpp, link=GEN4_X16)
        up = b.bridge(rp, bdf(root_bus + 1), AMD, 0x14A0, link=GEN4_X16)
        down = b.bridge(up, bdf(root_bus + 2), AMD, 0x14A1, link=GEN4_X16)
        addr = bdf(root_bus + 3)
        b.function(
            down,
            addr,
            AMD,
            0x740F,
            CLASS_DISPLAY_OTHER,
            driver="amdgpu",
            subsystem=(AMD, 0x0C34),
            revision=0x02,
            link=GEN4_X16,
        )
        b.drm(addr, 1 + i, i)
        b.amdgpu(addr, MI210_VRAM)
        gpu_id = int(ids.hex_id(b.seed, f"kfd/{addr}", 4), 16) or 1
        kfd.append(KfdGpu(b.get(addr), 128 + i, gpu_id, MI210_VRAM))
    b.kfd(kfd)

    root = b.root_complex(0, 0xE0, numa=1)
    b.function(root, bdf(0xE0), *host, 0x060000, link=None)
    rp = b.bridge(root, bdf(0xE0, 0x01, 1), *gpp, link=GEN4_X16)
    flex = bdf(0xE1)
    b.function(
        rp,
        flex,
        0x8086,
        0x56C0,
        CLASS_DISPLAY_OTHER,
        driver="i915",
        subsystem=(0x8086, 0x4905),
        revision=0x08,
        link=GEN4_X16,
    )
    b.drm(flex, 5, 4)
    b.pci_ids()


# -- edge-mixed -------------------------------------------------------------------------------

XILINX = 0x10EE
UNKNOWN_VENDOR = 0x1E52


def edge_mixed(b: HostBuilder) -> None:
    """Edge node: 1 L4, 1 E810 (4 of 8 VFs), 1 Alveo U250, 1 unknown accelerator, 1 NUMA node."""
    b.numa(["0-15"], [[10]])
    b.identity("edge-01", "Intel(R) Xeon(R) D-2776NT CPU @ 2.10GHz")
    b.nvidia_version(DRIVER_VERSION)
    board.host_bridge(b, numa=0)
    board.onboard_nic(
        b,
        bdf(0, 0x1C, 4),
        0x05,
        "eno1",
        root_port=board.INTEL_ROOT_PORT,
        device=(0x8086, 0x1533),
        driver="igb",
    )
    root = b.root_complex(0, 0x00)

    port = b.bridge(root, bdf(0, 0x01), *board.INTEL_ROOT_PORT, link=GEN4_X16)
    gpu = nvidia_gpu(b, port, bdf(0x01), L4, index=0, numa=0)

    port = b.bridge(root, bdf(0, 0x1B), *board.INTEL_ROOT_PORT, link=GEN4_X16)
    e810 = bdf(0x02)
    b.function(
        port,
        e810,
        0x8086,
        0x1593,
        CLASS_ETHERNET,
        driver="ice",
        subsystem=(0x8086, 0x0002),
        revision=0x02,
        link=GEN4_X16,
    )
    b.netdev(e810, "enp2s0f0", speed=25000)
    vfs = b.sriov(e810, total=8, num=4, vf_device_id=0x1889, vf_driver="iavf", offset=8)
    for n, vf in enumerate(vfs):
        b.netdev(vf, f"enp2s0f0v{n}", speed=25000)

    port = b.bridge(root, bdf(0, 0x1C), *board.INTEL_ROOT_PORT, link=GEN3_X16)
    alveo_u250(b, port, 0x03, card=0, render=0)

    port = b.bridge(root, bdf(0, 0x1D), *board.INTEL_ROOT_PORT, link=GEN4_X16)
    b.function(port, bdf(0x04), UNKNOWN_VENDOR, 0x0100, CLASS_ACCEL, revision=0x01)

    b.nvml([gpu])
    b.pci_ids()


def _one_numa_gpus(b: HostBuilder, hostname: str, cpu: str, models: list[NvidiaModel]) -> None:
    """One NUMA node, an onboard NIC, one GPU per root port (buses 01, 02, ...)."""
    b.numa(["0-15"], [[10]])
    b.identity(hostname, cpu)
    b.nvidia_version(DRIVER_VERSION)
    board.host_bridge(b, numa=0)
    board.onboard_nic(
        b,
        bdf(0, 0x1C, 4),
        0x05,
        "eno1",
        root_port=board.INTEL_ROOT_PORT,
        device=(0x8086, 0x1533),
        driver="igb",
    )
    root = b.root_complex(0, 0x00)
    gpus = []
    for n, model in enumerate(models):
        port = b.bridge(root, bdf(0, 0x01 + 2 * n), *board.INTEL_ROOT_PORT, link=model.link)
        gpus.append(nvidia_gpu(b, port, bdf(0x01 + n), model, index=n, numa=0))
    b.nvml(gpus)
    b.pci_ids()


def l4_pair(b: HostBuilder) -> None:
    """Inference node: 2 NVIDIA L4 on one NUMA node (the smallest multi-GPU host that
    memory sharing can spread over), onboard NIC."""
    _one_numa_gpus(b, "infer-01", "Intel(R) Xeon(R) Silver 4410Y", [L4, L4])


def h100_l4(b: HostBuilder) -> None:
    """Mixed-generation node: 2 NVIDIA H100 SXM and 1 L4 on one NUMA node, onboard NIC
    (normalized units and model preferences)."""
    _one_numa_gpus(b, "mixed-01", "Intel(R) Xeon(R) Gold 6430", [H100_SXM, H100_SXM, L4])


def alveo_u250(b: HostBuilder, port: Parent, bus: int, card: int, render: int) -> None:
    """Both functions of an Alveo U250 (XDMA shell): ``.0`` management, ``.1`` user.

    Alveo cards report class 0x120000 (processing accelerator) on both functions.
    ``/dev/xclmgmt<N>`` uses N = bus << 8 | devfn, as the xclmgmt driver names it.
    """
    mgmt, user = bdf(bus, 0, 0), bdf(bus, 0, 1)
    b.function(
        port,
        mgmt,
        XILINX,
        0x5004,
        CLASS_ACCEL,
        driver="xclmgmt",
        subsystem=(XILINX, 0x000E),
        link=GEN3_X16,
    )
    b.function(
        port,
        user,
        XILINX,
        0x5005,
        CLASS_ACCEL,
        driver="xocl",
        subsystem=(XILINX, 0x000E),
        link=GEN3_X16,
    )
    b.dev_node(f"/dev/xclmgmt{Bdf.parse(mgmt).rid}")
    b.drm(user, card, render)
