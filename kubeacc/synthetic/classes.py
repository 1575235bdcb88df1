"""Class devices that hang off PCI functions: ``net``, ``infiniband``, ``drm``, ``nvme``.

Each writes the device's directory inside the PCI function (``<pcidev>/net/<ifname>``) and the
relative ``/sys/class/...`` link to it, plus any ``/dev`` nodes the class has.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from kubeacc.synthetic.fsw import TreeWriter
from kubeacc.synthetic.pci import PciFunction

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32

DRM_MAJOR = 226
UVERBS_MAJOR = 231
UVERBS_MINOR_BASE = 192


@dataclass
class NetdevSpec:
    """What a network interface reports in ``/sys/class/net/<ifname>``."""

    address: str
    mtu: int = 1500
    speed: int = 100000
    operstate: str = "up"
    link_type: int = ARPHRD_ETHER


def write_loopback(w: TreeWriter) -> None:
    d = PurePosixPath("/sys/devices/virtual/net/lo")
    for name, value in (
        ("address", "00:00:00:00:00:00"),
        ("addr_len", 6),
        ("ifindex", 1),
        ("mtu", 65536),
        ("operstate", "unknown"),
        ("carrier", 1),
        ("type", 772),
    ):
        w.attr(d / name, value)
    w.symlink("/sys/class/net/lo", d)


def write_netdev(
    w: TreeWriter, fn: PciFunction, ifname: str, spec: NetdevSpec, ifindex: int
) -> PurePosixPath:
    d = fn.sysfs / "net" / ifname
    addr_len = len(spec.address.split(":"))
    w.attr(d / "address", spec.address)
    w.attr(d / "addr_len", addr_len)
    w.attr(d / "operstate", spec.operstate)
    w.attr(d / "carrier", 1 if spec.operstate == "up" else 0)
    w.attr(d / "mtu", spec.mtu)
    w.attr(d / "speed", spec.speed if spec.operstate == "up" else -1)
    w.attr(d / "duplex", "full")
    w.attr(d / "ifindex", ifindex)
    w.attr(d / "type", spec.link_type)
    w.attr(d / "dev_port", 0)
    w.symlink(d / "device", fn.sysfs)
    w.symlink(f"/sys/class/net/{ifname}", d)
    return d


@dataclass
class RdmaSpec:
    """One RDMA device (single port) as ``/sys/class/infiniband/<ibdev>`` shows it."""

    node_guid: str
    link_layer: str = "InfiniBand"  # or "Ethernet" for RoCE
    rate: str = "400 Gb/sec (4X NDR)"
    hca_type: str = "MT4129"
    fw_ver: str = "28.39.1002"
    board_id: str = "MT_0000000838"
    state: str = "4: ACTIVE"
    phys_state: str = "5: LinkUp"
    lid: int = 0


def write_rdma(
    w: TreeWriter, fn: PciFunction, ibdev: str, spec: RdmaSpec, uverbs: int
) -> PurePosixPath:
    d = fn.sysfs / "infiniband" / ibdev
    w.attr(d / "node_guid", spec.node_guid)
    w.attr(d / "sys_image_guid", spec.node_guid)
    w.attr(d / "node_type", "1: CA")
    w.attr(d / "hca_type", spec.hca_type)
    w.attr(d / "fw_ver", spec.fw_ver)
    w.attr(d / "board_id", spec.board_id)
    p = d / "ports" / "1"
    w.attr(p / "state", spec.state)
    w.attr(p / "phys_state", spec.phys_state)
    w.attr(p / "link_layer", spec.link_layer)
    w.attr(p / "rate", spec.rate)
    w.attr(p / "lid", f"0x{spec.lid:x}")
    w.attr(p / "sm_lid", "0x1" if spec.link_layer == "InfiniBand" else "0x0")
    w.attr(p / "gids" / "0", "fe80:0000:0000:0000:" + spec.node_guid)
    w.symlink(d / "device", fn.sysfs)
    w.symlink(f"/sys/class/infiniband/{ibdev}", d)
    v = fn.sysfs / "infiniband_verbs" / f"uverbs{uverbs}"
    w.attr(v / "ibdev", ibdev)
    w.attr(v / "abi_version", 1)
    w.attr(v / "dev", f"{UVERBS_MAJOR}:{UVERBS_MINOR_BASE + uverbs}")
    w.symlink(v / "device", fn.sysfs)
    w.symlink(f"/sys/class/infiniband_verbs/uverbs{uverbs}", v)
    w.attr("/sys/class/infiniband_verbs/abi_version", 6)
    w.dev_node(f"/dev/infiniband/uverbs{uverbs}")
    w.dev_node("/dev/infiniband/rdma_cm")
    return d


def write_drm(w: TreeWriter, fn: PciFunction, card: int, render: int | None) -> None:
    """``card<N>`` (and ``renderD<M>`` when the driver has render nodes) plus ``/dev/dri``."""
    nodes = [(f"card{card}", card)]
    if render is not None:
        nodes.append((f"renderD{render}", render))
    for name, minor in nodes:
        d = fn.sysfs / "drm" / name
        w.attr(d / "dev", f"{DRM_MAJOR}:{minor}")
        w.symlink(d / "device", fn.sysfs)
        w.symlink(f"/sys/class/drm/{name}", d)
        w.dev_node(f"/dev/dri/{name}")
    w.symlink(f"/dev/dri/by-path/pci-{fn.bdf}-card", f"/dev/dri/card{card}")
    if render is not None:
        w.symlink(f"/dev/dri/by-path/pci-{fn.bdf}-render", f"/dev/dri/renderD{render}")


def write_nvme(w: TreeWriter, fn: PciFunction, index: int, model: str, serial: str) -> None:
    d = fn.sysfs / "nvme" / f"nvme{index}"
    w.attr(d / "model", model)
    w.attr(d / "serial", serial)
    w.attr(d / "state", "live")
    w.symlink(d / "device", fn.sysfs)
    w.symlink(f"/sys/class/nvme/nvme{index}", d)
    w.dev_node(f"/dev/nvme{index}")
    w.dev_node(f"/dev/nvme{index}n1")
