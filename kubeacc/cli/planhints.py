"""Reasons ``kubeacc plan`` adds where the allocator alone would be silent.

A GPU whose memory discovery could not read (NVIDIA: NVML not found on the node) is published
without ``kubeacc.io/memory`` capacity and never memory-shared, whatever selector or policy
asks for it; the allocator then only says ``0 pass selector device.allowMultipleAllocations``
or ``0 with kubeacc.io/memory >= ...``. :func:`unknown_memory_hint` names those GPUs.
"""

from __future__ import annotations

from typing import Any

from kubeacc.engine.engine import Placement

DRIVER = "kubeacc.io"
MEMORY = "kubeacc.io/memory"


def _memory_unknown(objs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Node (pool) -> GPUs of kube-acc's slices that carry no memory capacity."""
    out: dict[str, list[str]] = {}
    for o in objs:
        spec = o.get("spec") or {}
        if o.get("kind") != "ResourceSlice" or spec.get("driver") != DRIVER:
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or []:
            attrs = d.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            if (
                kind == "gpu"
                and "migProfile" not in attrs
                and MEMORY not in (d.get("capacity") or {})
            ):
                out.setdefault(pool, []).append(str(d.get("name", "")))
    return out


def unknown_memory_hint(objs: list[dict[str, Any]], placement: Placement) -> list[str]:
    """A line for a claim that failed on memory sharing while some GPUs' memory is unknown."""
    if placement.ok or placement.explanation is None:
        return []
    why = "\n".join(placement.explanation.lines())
    if "allowMultipleAllocations" not in why and MEMORY not in why:
        return []
    unknown = _memory_unknown(objs)
    if not unknown:
        return []
    count = sum(len(v) for v in unknown.values())
    nodes = ", ".join(sorted(unknown))
    return [
        f"{count} GPUs on {nodes} have unknown memory (no {MEMORY} capacity: NVML not found "
        "on the node), so they are published whole and never memory-shared; "
        "kubeacc status --node NODE names the fix"
    ]
