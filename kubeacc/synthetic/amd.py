"""AMD GPU extras: amdgpu's memory attributes and the KFD topology under ``/sys/class/kfd``.

KFD numbers its topology nodes CPUs first (one per NUMA node) then GPUs; each GPU node's
``properties`` file carries ``location_id`` (bus << 8 | devfn), ``domain`` and
``drm_render_minor`` that tie it back to the PCI function and its render node.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeacc.synthetic.fsw import TreeWriter
from kubeacc.synthetic.pci import PciFunction

KFD = "/sys/class/kfd/kfd"


@dataclass(frozen=True)
class KfdGpu:
    fn: PciFunction
    render_minor: int
    gpu_id: int
    vram_bytes: int
    simd_count: int = 416
    gfx_target_version: int = 90010  # gfx90a
    unique_id: int = 0


def write_amdgpu_attrs(w: TreeWriter, fn: PciFunction, vram_bytes: int, unique_id: str) -> None:
    w.attr(fn.sysfs / "mem_info_vram_total", vram_bytes)
    w.attr(fn.sysfs / "mem_info_vram_used", 0)
    w.attr(fn.sysfs / "gpu_busy_percent", 0)
    w.attr(fn.sysfs / "mem_busy_percent", 0)
    w.attr(fn.sysfs / "unique_id", unique_id)


def write_kfd(w: TreeWriter, cpu_cores_by_node: list[int], gpus: list[KfdGpu]) -> None:
    w.dev_node("/dev/kfd")
    w.write(f"{KFD}/topology/system_properties", "platform_oem 0\nplatform_id 0\n")
    nodes: list[list[tuple[str, int]]] = []
    gpu_ids: list[int] = []
    for cores in cpu_cores_by_node:
        nodes.append([("cpu_cores_count", cores), ("simd_count", 0), ("mem_banks_count", 1)])
        gpu_ids.append(0)
    for g in gpus:
        nodes.append(
            [
                ("cpu_cores_count", 0),
                ("simd_count", g.simd_count),
                ("mem_banks_count", 1),
                ("gfx_target_version", g.gfx_target_version),
                ("vendor_id", g.fn.vendor),
                ("device_id", g.fn.device),
                ("location_id", g.fn.bdf.rid),
                ("domain", g.fn.bdf.domain),
                ("drm_render_minor", g.render_minor),
                ("local_mem_size", g.vram_bytes),
                ("unique_id", g.unique_id),
            ]
        )
        gpu_ids.append(g.gpu_id)
    for index, (props, gpu_id) in enumerate(zip(nodes, gpu_ids, strict=True)):
        d = f"{KFD}/topology/nodes/{index}"
        w.write(f"{d}/properties", "".join(f"{k} {v}\n" for k, v in props))
        w.attr(f"{d}/gpu_id", gpu_id)
