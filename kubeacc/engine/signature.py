"""Node signatures: two nodes with equal signatures get the same answer for any claim.

A signature lists, in the scheduler's search order, what the search can observe of each device
(its attributes as CEL and constraints see them, capacity and request policy, taints, counter
consumption, whether a per-device node selector admits the node) and what is taken (in use,
capacity consumed, counters left). Names of nodes, pools and devices are left out: they change
the allocation's text, never whether one exists. Answers to a claim are computed once per
signature, so thousands of identical nodes cost one search plus one signature each.

With compatibility groups enforced (DRADeviceCompatibilityGroups on) a device's groups are part
of what the search observes, and so is the groups' intersection of each pool's allocated
devices (which may include devices of slices that do not target the node).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from kubeacc.engine.compatgroups import baseline, device_groups
from kubeacc.engine.nodepools import NodePool, device_node_matches
from kubeacc.engine.pools import Device, DeviceKey, Node
from kubeacc.engine.state import Ledger


class Signatures:
    def __init__(self, groups: bool = False) -> None:
        #: compatibility groups are enforced: the allocated devices' groups count
        self.groups = groups
        self._static: dict[int, int] = {}
        self._ids: dict[tuple[str, ...], int] = {}
        self._node_static: dict[str, tuple[Hashable, ...]] = {}
        self._devices: dict[int, list[Device]] = {}
        self._interned: dict[Hashable, int] = {}

    @property
    def interned(self) -> int:
        return len(self._interned)

    def forget(self) -> None:
        self._interned.clear()

    def intern(self, sig: Hashable) -> int:
        """A small number for a signature (hashing one long tuple per lookup is the cost)."""
        return self._interned.setdefault(sig, len(self._interned))

    def devices(self, pools: Sequence[NodePool]) -> list[Device]:
        """The node's devices in signature order (positions are what signatures compare)."""
        hit = self._devices.get(id(pools))
        if hit is None:
            hit = [d for p in pools for _, devs in p.slices for d in devs]
            self._devices[id(pools)] = hit
        return hit

    def device_id(self, d: Device) -> int:
        hit = self._static.get(id(d))
        if hit is None:
            d.typed_attribute("")  # fills the typed view
            key = (
                d.fingerprint,
                repr(d.taints),
                repr(d.consumes),
                repr(device_groups(d)) if self.groups else "",
                repr(sorted(d.capacity_policy.items())),
                repr(sorted((d._typed or {}).items())),
            )
            hit = self._ids.setdefault(key, len(self._ids))
            self._static[id(d)] = hit
        return hit

    def _static_part(self, node: Node, pools: Sequence[NodePool]) -> tuple[Hashable, ...]:
        hit = self._node_static.get(node.name)
        if hit is None:
            parts: list[Hashable] = []
            names = [p.name for p in pools]
            for p in pools:
                counters = tuple(
                    sorted((cs, tuple(sorted(c.items()))) for cs, c in p.counters.items())
                )
                # pools are told apart by position; equal names matter (counters in flight are
                # kept per pool name)
                parts.append((p.driver, names.index(p.name), p.incomplete, p.invalid, counters))
                for per_device, devs in p.slices:
                    for d in devs:
                        parts.append(
                            (self.device_id(d), device_node_matches(d.raw, node))
                            if per_device
                            else self.device_id(d)
                        )
            hit = self._node_static[node.name] = tuple(parts)
        return hit

    def of(self, node: Node, pools: Sequence[NodePool], ledger: Ledger) -> Hashable:
        taken: list[Hashable] = []
        i = 0

        def allocated(k: DeviceKey) -> bool:
            return k in ledger.in_use or k in ledger.capacity_used

        for p in pools:
            if self.groups and p.counters:
                devices = [d for _, devs in p.slices for d in devs] + p.others
                base = baseline(devices, lambda k: k in ledger.in_use or k in ledger.capacity_used)
                if base:
                    taken.append((-2, tuple(sorted(base.items(), key=lambda kv: kv[0]))))
            if p.counters:
                counted = p.counters_used(allocated)
                for cs in sorted(p.counters):
                    used = counted.get(cs)
                    if used:
                        taken.append((-1, cs, tuple(sorted(used.items()))))
            for _, devs in p.slices:
                for d in devs:
                    if d.key in ledger.in_use:
                        taken.append(i)
                    elif d.key in ledger.capacity_used:
                        taken.append((i, tuple(sorted(ledger.capacity_of(d).items()))))
                    i += 1
        return (self._static_part(node, pools), tuple(taken))
