"""The topology of one node as a graph: NUMA nodes, the PCIe tree and device closeness.

Built once from an :class:`~kubeacc.model.Inventory`; everything placement needs afterwards is a
table lookup. Devices are numbered ``0..n-1`` in inventory order; ``closeness[i][j]`` turns the
tiered :func:`~kubeacc.topology.distance.distance` into a weight where larger is better, so a set's
*link score* is the sum of its pairwise closeness.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kubeacc.model import Device, Inventory
from kubeacc.topology.distance import LOCAL_NUMA_DISTANCE, Tier, distance, link_count, tier

#: Closeness of a pair = CLOSENESS_BASE - distance; the farthest pair (UNKNOWN) still scores 1.
CLOSENESS_BASE = int(Tier.UNKNOWN) + 1


@dataclass(frozen=True)
class PCIeSwitch:
    """A switch below a root port, named by its upstream bridge BDF."""

    bridge: str
    root: str
    devices: tuple[int, ...]


@dataclass(frozen=True)
class PCIeRoot:
    name: str
    numa_node: int
    switches: tuple[str, ...]
    devices: tuple[int, ...]


@dataclass
class TopologyGraph:
    """Devices, NUMA nodes and the PCIe tree of one node, with pairwise weights."""

    devices: list[Device]
    numa_ids: list[int]
    numa_distances: dict[int, list[int]]
    roots: dict[str, PCIeRoot]
    switches: dict[str, PCIeSwitch]
    dist: list[list[int]]
    closeness: list[list[int]]
    tiers: list[list[Tier]]
    links: list[list[int]]
    index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_inventory(cls, inventory: Inventory) -> TopologyGraph:
        return cls.build(inventory.devices, {n.id: list(n.distances) for n in inventory.numa_nodes})

    @classmethod
    def build(
        cls, devices: Sequence[Device], numa_distances: dict[int, list[int]] | None = None
    ) -> TopologyGraph:
        devs = list(devices)
        nd = dict(numa_distances or {})
        numa_ids = sorted(set(nd) | {d.numa_node for d in devs if d.numa_node >= 0})
        for nid in numa_ids:  # a node without a SLIT row: local 10, remote 20
            if not nd.get(nid):
                nd[nid] = [
                    LOCAL_NUMA_DISTANCE if j == nid else 2 * LOCAL_NUMA_DISTANCE
                    for j in range(max(numa_ids) + 1)
                ]
        n = len(devs)
        dist = [[0] * n for _ in range(n)]
        tiers = [[Tier.SAME] * n for _ in range(n)]
        links = [[0] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                dd = distance(devs[i], devs[j], nd)
                dist[i][j] = dist[j][i] = dd
                t = tier(devs[i], devs[j])
                tiers[i][j] = tiers[j][i] = t
                lc = link_count(devs[i], devs[j])
                links[i][j] = links[j][i] = lc
        closeness = [
            [0 if i == j else CLOSENESS_BASE - dist[i][j] for j in range(n)] for i in range(n)
        ]
        switch_members: dict[str, list[int]] = {}
        switch_root: dict[str, str] = {}
        root_members: dict[str, list[int]] = {}
        root_numa: dict[str, int] = {}
        for i, d in enumerate(devs):
            if d.pcie_root is None:
                continue
            root_members.setdefault(d.pcie_root, []).append(i)
            root_numa.setdefault(d.pcie_root, d.numa_node)
            # pcie_path[0] is the root port; a switch is identified by its upstream port.
            if len(d.pcie_path) >= 2:
                bridge = d.pcie_path[1]
                switch_members.setdefault(bridge, []).append(i)
                switch_root[bridge] = d.pcie_root
        switches = {
            b: PCIeSwitch(b, switch_root[b], tuple(m)) for b, m in sorted(switch_members.items())
        }
        roots = {
            r: PCIeRoot(
                r,
                root_numa[r],
                tuple(b for b, s in switches.items() if s.root == r),
                tuple(m),
            )
            for r, m in sorted(root_members.items())
        }
        return cls(
            devices=devs,
            numa_ids=numa_ids,
            numa_distances=nd,
            roots=roots,
            switches=switches,
            dist=dist,
            closeness=closeness,
            tiers=tiers,
            links=links,
            index={d.name: i for i, d in enumerate(devs)},
        )

    def __len__(self) -> int:
        return len(self.devices)

    def numa_of(self, i: int) -> int:
        return self.devices[i].numa_node

    def switch_of(self, i: int) -> str | None:
        path = self.devices[i].pcie_path
        return path[1] if len(path) >= 2 else None

    def root_of(self, i: int) -> str | None:
        return self.devices[i].pcie_root

    def numa_distance(self, a: int, b: int) -> int:
        row = self.numa_distances.get(a, [])
        return row[b] if b < len(row) else 2 * LOCAL_NUMA_DISTANCE

    def score(self, members: Iterable[int]) -> int:
        """Link score of a set: the sum of pairwise closeness (higher is better)."""
        m = list(members)
        c = self.closeness
        return sum(c[a][b] for x, a in enumerate(m) for b in m[x + 1 :])

    def indices(self, names: Iterable[str]) -> list[int]:
        """Device indices for names or PCI addresses."""
        by_bdf = {d.pci.bus_id: i for i, d in enumerate(self.devices) if d.pci}
        out = []
        for name in names:
            if name in self.index:
                out.append(self.index[name])
            elif name in by_bdf:
                out.append(by_bdf[name])
            else:
                raise KeyError(f"unknown device {name!r}")
        return out
