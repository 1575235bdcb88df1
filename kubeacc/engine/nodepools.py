"""The pools one node sees, gathered exactly as kube-scheduler's allocator gathers them.

Per node, only slices relevant to it count (its ``nodeName``, ``allNodes``, a matching
``nodeSelector``, a ``perDeviceNodeSelection`` slice with a device for it; in v1.36 also every
slice of shared counters, in v1.37 such a slice only when it targets the node, the pool's other
slices being fetched when the node's look incomplete). Within a pool the highest generation *among
those slices* wins, so an older generation is used when the newest one only targets other nodes; if
the node's slices are fewer than ``resourceSliceCount``, all slices of the pool decide: a newer
generation anywhere makes the pool obsolete (ignored), too few slices make it incomplete (v1.37
ignores a slice whose devices list compatibility groups while its alpha gate is off, so such a
pool is incomplete: none of its devices is allocated, ``All`` requests over it fail). Duplicate
device names or counters that name an unknown counter set make a pool invalid. Pools are ordered by
driver and name, those with a device that has binding conditions after all others (a device that
needs the driver to confirm binding is the last resort), slices by name: the order the scheduler's
first-fit search walks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.engine.pools import (
    Device,
    DeviceCache,
    DeviceKey,
    Node,
    get,
    node_selector_matches,
)
from kubeacc.engine.quantity import QuantityError, parse_quantity
from kubeacc.engine.release import Release
from kubeacc.engine.release import release as default_release

Slice = Mapping[str, Any]


@dataclass
class NodePool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str | None = None
    #: (per-device node selection, devices) of each slice targeting the node, in slice order
    slices: list[tuple[bool, list[Device]]] = field(default_factory=list)
    counters: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    #: a device of the pool (as the node sees it) lists ``bindingConditions``
    binding_conditions: bool = False
    #: devices of the pool's slices that do not target the node, read when the node's own
    #: slices looked incomplete (their allocations count, as for counters)
    others: list[Device] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    def all_devices(self) -> list[Device]:
        """The pool's devices as the allocator reads them for the node: its slices targeting
        the node (by name), then the others fetched with the pool."""
        return [d for _, devs in self.slices for d in devs] + self.others

    def counters_used(
        self, allocated: Callable[[DeviceKey], bool]
    ) -> dict[str, dict[str, Fraction]]:
        """Counters the pool's ``allocated`` devices consume, as the allocator counts them: only
        devices of the pool as the node sees it (an allocation of another generation's device
        of the same name counts, one of a device the node's generation lacks does not)."""
        out: dict[str, dict[str, Fraction]] = {}
        for d in self.all_devices():
            if not d.consumes or not allocated(d.key):
                continue
            for cs, counters in d.consumes:
                used = out.setdefault(cs, {})
                for n, v in counters.items():
                    used[n] = used.get(n, Fraction(0)) + v
        return out


def _pool_key(s: Slice) -> tuple[str, str]:
    spec = get(s, "spec", {})
    return str(get(spec, "driver", "")), str(get(get(spec, "pool", {}), "name", ""))


def _generation(s: Slice) -> int:
    return int(get(get(get(s, "spec", {}), "pool", {}), "generation", 0))


def _count(s: Slice) -> int:
    return int(get(get(get(s, "spec", {}), "pool", {}), "resourceSliceCount", 1))


def device_node_matches(raw: Mapping[str, Any], node: Node) -> bool:
    if get(raw, "allNodes", False):
        return True
    if get(raw, "nodeName"):
        return bool(get(raw, "nodeName") == node.name)
    sel = get(raw, "nodeSelector")
    return sel is not None and node_selector_matches(sel, node)


def relevant(s: Slice, node: Node, counters_everywhere: bool = True) -> bool:
    """Whether the slice is gathered for ``node``; ``counters_everywhere``: a slice with
    shared counters is, whatever node it targets (v1.36)."""
    spec = get(s, "spec", {})
    if counters_everywhere and get(spec, "sharedCounters"):
        return True
    if get(spec, "nodeName") or get(spec, "allNodes", False) or get(spec, "nodeSelector"):
        return device_node_matches(spec, node)
    if get(spec, "perDeviceNodeSelection", False):
        return any(device_node_matches(d, node) for d in get(spec, "devices", []) or [])
    return False


def uses_compatibility_groups(s: Slice) -> bool:
    """A device of the slice lists compatibility groups on a counter it consumes."""
    return any(
        get(c, "compatibilityGroups")
        for d in get(get(s, "spec", {}), "devices", []) or []
        for c in get(d, "consumesCounters", []) or []
    )


def gather_node_pools(
    node: Node,
    slices_for_node: Sequence[Slice],
    slices_by_pool: Mapping[tuple[str, str], Sequence[Slice]],
    cache: DeviceCache,
    release: Release | None = None,
) -> list[NodePool]:
    rel = release or default_release()
    groups: dict[tuple[str, str], list[Slice]] = {}
    hidden = rel.compatibility_group_slices_ignored
    for s in slices_for_node:
        if hidden and uses_compatibility_groups(s):
            continue
        if not relevant(s, node, rel.counters_everywhere):
            continue
        key = _pool_key(s)
        have = groups.get(key)
        if have is None or _generation(s) > _generation(have[0]):
            groups[key] = [s]
        elif _generation(s) == _generation(have[0]):
            have.append(s)
    out: list[NodePool] = []
    for key, group in groups.items():
        gen = _generation(group[0])
        every = group
        if len(group) != _count(group[0]):
            everything = slices_by_pool.get(key, ())
            if any(_generation(s) > gen for s in everything):
                continue  # obsolete: the driver is replacing this generation
            every = [
                s
                for s in everything
                if _generation(s) == gen and not (hidden and uses_compatibility_groups(s))
            ]
            if len(every) != _count(group[0]):
                out.append(NodePool(key[0], key[1], incomplete=True))
                continue
        out.append(
            _build(key, sorted(group, key=_slice_name), every, cache, rel.counters_everywhere)
        )
    out.sort(key=lambda p: (p.binding_conditions, p.driver, p.name))
    return out


def _with_rest(group: Sequence[Slice], every: Sequence[Slice]) -> list[Slice]:
    names = {_slice_name(s) for s in group}
    return [*group, *(s for s in every if _slice_name(s) not in names)]


def _slice_name(s: Slice) -> str:
    return str(get(get(s, "metadata", {}), "name", ""))


def _build(
    key: tuple[str, str],
    group: list[Slice],
    every: Sequence[Slice],
    cache: DeviceCache,
    counters_everywhere: bool = True,
) -> NodePool:
    pool = NodePool(key[0], key[1])
    device_slices = [s for s in group if not get(get(s, "spec", {}), "sharedCounters")]
    names: set[str] = set()
    for s in device_slices:
        devs = cache.devices(s)
        if isinstance(devs, str):
            pool.invalid = devs
            return pool
        for d in devs:
            if d.name in names:
                pool.invalid = f"duplicate device name {d.name}"
                return pool
            names.add(d.name)
        pool.slices.append((bool(get(get(s, "spec", {}), "perDeviceNodeSelection", False)), devs))
    # v1.37: a counter slice that does not target the node comes with the rest of the pool
    counter_slices = group if counters_everywhere else _with_rest(group, every)
    for s in counter_slices:
        for cs in get(get(s, "spec", {}), "sharedCounters", []) or []:
            name = str(get(cs, "name", ""))
            if name in pool.counters:
                pool.invalid = f"duplicate counter set name {name}"
                return pool
            try:
                pool.counters[name] = {
                    n: parse_quantity(str(get(c, "value", "0")))
                    for n, c in (get(cs, "counters", {}) or {}).items()
                }
            except QuantityError as e:
                pool.invalid = str(e)
                return pool
    seen = {id(s) for s in group}
    rest = [s for s in every if id(s) not in seen]
    for s in rest:
        devs = cache.devices(s)
        pool.others.extend(devs if not isinstance(devs, str) else [])
    for s in [*group, *rest]:
        devs = cache.devices(s)
        for d in devs if not isinstance(devs, str) else []:
            for cs, counters in d.consumes:
                if cs not in pool.counters:
                    pool.invalid = f"counter set {cs} not found"
                    return pool
                missing = [n for n in counters if n not in pool.counters[cs]]
                if missing:
                    pool.invalid = f"counter {missing[0]} not found in counter set {cs}"
                    return pool
    # Present at all counts, as in the allocator (the API server stores no empty list).
    pool.binding_conditions = any(
        get(d.raw, "bindingConditions") is not None for _, devs in pool.slices for d in devs
    )
    return pool
