"""Build a node's devices from a compact shape description.

Placement code, its tests and the benchmarks need nodes of a known structure (so many NUMA nodes,
root complexes per NUMA node, switches per root, devices per switch, optional NVLink-style
links). This produces real :class:`~kubeacc.model.Device` objects with consistent PCI addresses,
``pcie_root`` and ``pcie_path``; it never touches the host.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubeacc.model import Device, DeviceType, Inventory, Link, NUMANode, PCIIdentity, device_name


def build_node(
    numa: int = 2,
    roots_per_numa: int = 1,
    switches_per_root: int = 1,
    devices_per_switch: int = 2,
    *,
    links: Iterable[tuple[int, int, int]] = (),
    remote_distance: int = 21,
    dtype: DeviceType = DeviceType.GPU,
    hostname: str = "node",
) -> Inventory:
    """An inventory of ``numa*roots_per_numa*switches_per_root*devices_per_switch`` devices.

    At most 16 root complexes, 15 switches per root and 31 devices per switch.

    ``links`` lists ``(i, j, count)`` direct links between device indices. ``switches_per_root=0``
    puts ``devices_per_switch`` devices straight on root ports (no shared switch).
    """
    devices: list[Device] = []
    for node in range(numa):
        for r in range(roots_per_numa):
            root_bus = (node * roots_per_numa + r) * 0x10
            root = f"pci0000:{root_bus:02x}"
            port = f"0000:{root_bus:02x}:01.0"
            groups = max(switches_per_root, 1)
            for s in range(groups):
                upstream = f"0000:{root_bus + 1 + s:02x}:00.0"
                for k in range(devices_per_switch):
                    # Each device sits on the switch's bus (or the root bus), device k+1.
                    bdf = f"0000:{root_bus + 1 + s:02x}:{k + 1:02x}.0"
                    if switches_per_root:
                        path = [port, upstream]
                    else:
                        bdf = f"0000:{root_bus:02x}:{s * devices_per_switch + k + 2:02x}.0"
                        path = [f"0000:{root_bus:02x}:01.{k % 8}"]
                    devices.append(
                        Device(
                            name=device_name(dtype, bdf),
                            type=dtype,
                            vendor="synthetic",
                            model="s1",
                            index=len(devices),
                            source="layout",
                            pci=PCIIdentity(
                                bus_id=bdf,
                                vendor_id="0x10de",
                                device_id="0x2330",
                                class_id="0x030200",
                            ),
                            numa_node=node,
                            pcie_root=root,
                            pcie_path=path,
                        )
                    )
    for i, j, count in links:
        a, b = devices[i], devices[j]
        assert a.pci is not None and b.pci is not None
        a.links = [*a.links, Link(peer=b.pci.bus_id, count=count)]
        b.links = [*b.links, Link(peer=a.pci.bus_id, count=count)]
    nodes = [
        NUMANode(id=n, distances=[10 if m == n else remote_distance for m in range(numa)])
        for n in range(numa)
    ]
    return Inventory(hostname=hostname, devices=devices, numa_nodes=nodes)
