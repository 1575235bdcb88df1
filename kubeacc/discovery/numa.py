"""NUMA nodes, their CPUs and SLIT distances, from /sys/devices/system/node."""

from __future__ import annotations

from kubeacc.host.files import HostRoot
from kubeacc.model import NUMANode

NODE_DIR = "/sys/devices/system/node"


def read_numa(host: HostRoot) -> list[NUMANode]:
    nodes = []
    for entry in host.listdir(NODE_DIR):
        if not entry.startswith("node") or not entry[4:].isdigit():
            continue
        path = f"{NODE_DIR}/{entry}"
        cpus = host.read_text(f"{path}/cpulist", required=False) or ""
        distances: list[int] = []
        text = host.read_text(f"{path}/distance", required=False)
        if text:
            try:
                distances = [int(x) for x in text.split()]
            except ValueError:
                host.sink.add(f"{path}/distance", f"not a list of integers: {text[:40]!r}")
        if any(d < 0 for d in distances):
            host.sink.add(f"{path}/distance", "negative distance ignored")
            distances = []
        nodes.append(NUMANode(id=int(entry[4:]), cpus=cpus, distances=distances))
    return sorted(nodes, key=lambda n: n.id)
