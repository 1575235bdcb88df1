"""How far apart two devices are, as one ordered number.

The tiers follow what a multi-device job feels: a direct link (NVLink-style) beats everything;
then sharing a PCIe switch (peer-to-peer traffic never reaches the root complex); then sharing a
root complex; then sharing a NUMA node; then crossing NUMA nodes, where the SLIT distance between
the nodes orders the cross-NUMA pairs among themselves. Lower is closer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import IntEnum

from kubeacc.model import Device


class Tier(IntEnum):
    SAME = 0
    LINKED = 10
    SAME_SWITCH = 20
    SAME_ROOT = 30
    SAME_NUMA = 40
    CROSS_NUMA = 50
    UNKNOWN = 60


#: The SLIT distance of a node to itself; remote distances are larger (typically 20-32).
LOCAL_NUMA_DISTANCE = 10


def link_count(a: Device, b: Device) -> int:
    """Parallel direct links between the two devices, as either side reports them."""
    if a.pci is None or b.pci is None:
        return 0
    ab = sum(link.count for link in a.links if link.peer == b.pci.bus_id)
    ba = sum(link.count for link in b.links if link.peer == a.pci.bus_id)
    return max(ab, ba)


def shares_switch(a: Device, b: Device) -> bool:
    """True when both sit below a common bridge that is not the root port itself.

    ``pcie_path`` lists the bridges from the root port down; two devices behind one switch
    share the switch's upstream port (path element 1 and below), while devices on different
    root ports share nothing in their paths.
    """
    if a.pcie_root is None or a.pcie_root != b.pcie_root:
        return False
    common = set(a.pcie_path[1:]) & set(b.pcie_path[1:])
    return bool(common)


def tier(a: Device, b: Device) -> Tier:
    if a.name == b.name:
        return Tier.SAME
    if link_count(a, b):
        return Tier.LINKED
    if shares_switch(a, b):
        return Tier.SAME_SWITCH
    if a.pcie_root is not None and a.pcie_root == b.pcie_root:
        return Tier.SAME_ROOT
    if a.numa_node < 0 or b.numa_node < 0:
        return Tier.UNKNOWN
    if a.numa_node == b.numa_node:
        return Tier.SAME_NUMA
    return Tier.CROSS_NUMA


def distance(
    a: Device,
    b: Device,
    numa_distances: Mapping[int, Sequence[int]] | None = None,
) -> int:
    """Tier of the pair, refined inside a tier.

    More parallel links make a linked pair closer (up to 9 levels); a larger SLIT distance
    makes a cross-NUMA pair farther. The result is symmetric and 0 only for a device and itself.
    """
    t = tier(a, b)
    if t is Tier.LINKED:
        return int(Tier.LINKED) - min(link_count(a, b), 9)
    if t is Tier.CROSS_NUMA and numa_distances:
        row = numa_distances.get(a.numa_node, ())
        if b.numa_node < len(row):
            extra = max(0, row[b.numa_node] - LOCAL_NUMA_DISTANCE)
            return int(Tier.CROSS_NUMA) + min(extra, 9)
    return int(t)
