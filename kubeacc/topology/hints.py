"""NUMA affinity masks and topology hints, with the kubelet's rules for device hints.

A hint is a NUMA bitmask (an ``int``, bit *n* = NUMA node *n*; ``None`` = no preference, which
the merge treats as "all NUMA nodes") and a ``preferred`` flag. The rules here are those of the
kubelet Topology Manager and its device manager hint provider:

* a device request gets one hint per NUMA mask whose devices can satisfy it (every non-empty
  combination of the node's NUMA nodes, in the kubelet's iteration order: by width, then
  lexicographically);
* the *minimum width* is computed over **all** devices of the resource (healthy or not, free or
  not): a hint is preferred exactly when its width equals that minimum, so when the narrowest
  fit is busy all hints become non-preferred;
* devices that must be reused (already allocated to the container/pod) must all lie in the mask;
  reusable devices without NUMA information are not counted;
* too few available+reusable devices gives an empty hint list ("no possible affinity"); a
  resource whose devices carry no NUMA information gives ``None`` ("no preference").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

#: The kubelet refuses (by default) machines with more NUMA nodes than this: the number of masks
#: to iterate grows as 2^n.
MAX_ALLOWABLE_NUMA_NODES = 8

Mask = int


def mask_of(*nodes: int) -> Mask:
    m = 0
    for n in nodes:
        if n < 0 or n > 63:
            raise ValueError(f"NUMA node id out of range: {n}")
        m |= 1 << n
    return m


def bits(mask: Mask) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def width(mask: Mask) -> int:
    return mask.bit_count()


def is_narrower(a: Mask, b: Mask) -> bool:
    """The kubelet's ``IsNarrowerThan``: fewer bits, or as many bits and a lower-numbered set."""
    if width(a) == width(b):
        return is_less(a, b)
    return width(a) < width(b)


def is_less(a: Mask, b: Mask) -> bool:
    """The kubelet's ``IsLessThan``: the masks compared as unsigned integers."""
    return a < b


def iterate_masks(numa_nodes: Sequence[int]) -> Iterator[Mask]:
    """Every non-empty combination of the NUMA nodes, by width, then in combination order."""
    for k in range(1, len(numa_nodes) + 1):
        for combo in combinations(numa_nodes, k):
            yield mask_of(*combo)


def fmt_mask(mask: Mask | None) -> str:
    return "any" if mask is None else "{" + ",".join(map(str, bits(mask))) + "}"


@dataclass(frozen=True)
class TopologyHint:
    affinity: Mask | None
    preferred: bool

    def __str__(self) -> str:
        return f"{fmt_mask(self.affinity)}{'' if self.preferred else ' (not preferred)'}"


#: What one provider returns: resource name -> hints. ``None`` for a resource: no preference;
#: ``[]``: no possible affinity. An empty mapping (or None): no preference for anything.
ProviderHints = Mapping[str, Sequence[TopologyHint] | None] | None


def device_hints(
    numa_nodes: Sequence[int],
    device_numa: Mapping[str, Sequence[int]],
    available: Sequence[str],
    request: int,
    reusable: Sequence[str] = (),
) -> list[TopologyHint] | None:
    """Hints for ``request`` devices of one resource, as the device manager generates them.

    ``device_numa`` maps every device of the resource (healthy or not, free or not) to its NUMA
    node ids (empty: unknown). ``available`` are the free healthy devices, ``reusable`` those
    already held by the container/pod that the allocation must keep.
    """
    if not any(device_numa.get(d) for d in device_numa):
        return None
    if len(set(available) | set(reusable)) < request:
        return []
    dev_masks = {d: mask_of(*nodes) for d, nodes in device_numa.items()}
    min_width = len(numa_nodes)
    hints: list[TopologyHint] = []
    for mask in iterate_masks(numa_nodes):
        in_mask = sum(1 for m in dev_masks.values() if m & mask)
        if in_mask >= request and width(mask) < min_width:
            min_width = width(mask)
        matching = 0
        ok = True
        for d in reusable:
            m = dev_masks.get(d, 0)
            if not m:
                continue
            if not m & mask:
                ok = False
                break
            matching += 1
        if not ok:
            continue
        matching += sum(1 for d in available if dev_masks.get(d, 0) & mask)
        if matching < request:
            continue
        hints.append(TopologyHint(mask, False))
    return [TopologyHint(h.affinity, width(h.affinity or 0) == min_width) for h in hints]


@dataclass(frozen=True)
class ContainerRequest:
    """Per-resource requests of one container; ``restartable`` marks a sidecar init container."""

    name: str
    requests: Mapping[str, int]
    init: bool = False
    restartable: bool = False


def pod_requests(containers: Sequence[ContainerRequest]) -> dict[str, int]:
    """What the pod as a whole needs of each resource (the pod scope's request).

    The effective pod request, per resource, is the larger of: the sum over app containers plus
    all sidecars (restartable init containers); and, for each regular init container, its own
    request plus the sidecars started before it.
    """
    resources = {r for c in containers for r in c.requests}
    out: dict[str, int] = {}
    for r in resources:
        sidecars = 0
        init_peak = 0
        for c in containers:
            if not c.init:
                continue
            if c.restartable:
                sidecars += c.requests.get(r, 0)
                init_peak = max(init_peak, sidecars)
            else:
                init_peak = max(init_peak, sidecars + c.requests.get(r, 0))
        apps = sum(c.requests.get(r, 0) for c in containers if not c.init)
        out[r] = max(apps + sidecars, init_peak)
    return out
