"""NUMA nodes, CPUs and the few host files outside ``/sys/bus/pci``.

Formats follow the kernel: ``cpulist`` files use ranges (``0-55,112-167``), ``cpumap`` and PCI
``local_cpus`` files are bitmaps printed in comma-separated 32-bit hex groups, most significant
group first, sized for every possible CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kubeacc.synthetic.fsw import TreeWriter

NODE_DIR = "/sys/devices/system/node"
CPU_DIR = "/sys/devices/system/cpu"


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8"`` -> ``[0, 1, 2, 3, 8]`` (empty text gives an empty list)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return sorted(set(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3,8"``: the kernel's ``%*pbl`` form."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def format_cpumask(cpus: Iterable[int], nr_cpus: int) -> str:
    """The kernel's ``%*pb`` bitmap: 32-bit hex groups joined by commas, high group first."""
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    nbits = max(nr_cpus, 1)
    groups: list[str] = []
    remaining = nbits
    while remaining > 0:
        width = remaining % 32 or 32
        remaining -= width
        chunk = (value >> remaining) & ((1 << width) - 1)
        groups.append(f"{chunk:0{(width + 3) // 4}x}")
    return ",".join(groups)


@dataclass
class NumaLayout:
    """The host's NUMA nodes: CPU lists and the SLIT distance matrix."""

    cpulists: list[str]
    distances: list[list[int]]
    cpus_by_node: list[list[int]] = field(init=False)
    nr_cpus: int = field(init=False)

    def __post_init__(self) -> None:
        if len(self.distances) != len(self.cpulists) or any(
            len(row) != len(self.cpulists) for row in self.distances
        ):
            raise ValueError("distance matrix must be square, one row per NUMA node")
        self.cpus_by_node = [parse_cpulist(c) for c in self.cpulists]
        every = [c for cpus in self.cpus_by_node for c in cpus]
        self.nr_cpus = (max(every) + 1) if every else 1

    @property
    def all_cpus(self) -> list[int]:
        return sorted({c for cpus in self.cpus_by_node for c in cpus})

    def node_cpus(self, node: int) -> list[int]:
        """CPUs local to ``node``; a device with no node (-1) is local to every CPU."""
        if 0 <= node < len(self.cpus_by_node):
            return self.cpus_by_node[node]
        return self.all_cpus

    def node_of_cpu(self, cpu: int) -> int:
        for node, cpus in enumerate(self.cpus_by_node):
            if cpu in cpus:
                return node
        return 0


def write_numa(w: TreeWriter, layout: NumaLayout) -> None:
    """``/sys/devices/system/node`` and ``/sys/devices/system/cpu`` for ``layout``."""
    n = len(layout.cpulists)
    span = "0" if n == 1 else f"0-{n - 1}"
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        w.attr(f"{NODE_DIR}/{name}", span)
    for node, cpus in enumerate(layout.cpus_by_node):
        d = f"{NODE_DIR}/node{node}"
        w.attr(f"{d}/cpulist", format_cpulist(cpus))
        w.attr(f"{d}/cpumap", format_cpumask(cpus, layout.nr_cpus))
        w.attr(f"{d}/distance", " ".join(str(x) for x in layout.distances[node]))
        for cpu in cpus:
            w.symlink(f"{d}/cpu{cpu}", f"{CPU_DIR}/cpu{cpu}")
    every = format_cpulist(layout.all_cpus)
    for name in ("online", "possible", "present"):
        w.attr(f"{CPU_DIR}/{name}", every)
    for cpu in layout.all_cpus:
        w.attr(f"{CPU_DIR}/cpu{cpu}/online", 1)
        w.attr(f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id", layout.node_of_cpu(cpu))


def write_cpuinfo(
    w: TreeWriter, layout: NumaLayout, model_name: str, vendor_id: str = "GenuineIntel"
) -> None:
    """A short ``/proc/cpuinfo``: the fields tools key on, one stanza per logical CPU."""
    stanzas: list[str] = []
    for cpu in layout.all_cpus:
        stanzas.append(
            f"processor\t: {cpu}\n"
            f"vendor_id\t: {vendor_id}\n"
            f"model name\t: {model_name}\n"
            f"physical id\t: {layout.node_of_cpu(cpu)}\n"
            f"siblings\t: {len(layout.node_cpus(layout.node_of_cpu(cpu)))}\n"
            "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr sse sse2 ht\n"
        )
    w.write("/proc/cpuinfo", "\n".join(stanzas) + "\n")


def write_identity(w: TreeWriter, hostname: str, kernel: str) -> None:
    """``/etc/hostname``, ``/proc/sys/kernel/hostname`` and the kernel release."""
    w.attr("/etc/hostname", hostname)
    w.attr("/proc/sys/kernel/hostname", hostname)
    w.attr("/proc/sys/kernel/osrelease", kernel)


def numa_distances(nodes: int, local: int = 10, remote: int = 21) -> list[list[int]]:
    """A flat SLIT: ``local`` on the diagonal, ``remote`` elsewhere."""
    return [[local if i == j else remote for j in range(nodes)] for i in range(nodes)]


def split_cpulists(cores_per_node: int, nodes: int, smt: bool = True) -> list[str]:
    """Linux's usual enumeration: first threads of all nodes, then the SMT siblings."""
    total = cores_per_node * nodes
    lists: list[str] = []
    for node in range(nodes):
        first = list(range(node * cores_per_node, (node + 1) * cores_per_node))
        cpus: Sequence[int] = first + [c + total for c in first] if smt else first
        lists.append(format_cpulist(cpus))
    return lists
