"""Device compatibility groups on shared counters (alpha gate DRADeviceCompatibilityGroups).

A device lists, per counter set it consumes, the ``compatibilityGroups`` it belongs to. With
the gate on, kube-scheduler v1.37 (its ``experimental`` allocator, the only variant that
supports the gate) lets devices draw on one counter set together only while their groups
intersect: the running intersection over every device placed on the set (devices already
allocated first, then the ones the search is adding) must stay non-empty. A device with no
groups goes only with devices that have none either, so "no groups" is a state of its own,
not the empty set.

The already-allocated part (the *baseline*) is folded in the pool's device order, as the
allocator reads its slices: the node's device slices by name, then the pool's other slices.
The fold keeps the first device's state when the peers disagree (a grouped device after a
no-group one changes nothing), which only matters for allocations that break the rule already.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubeacc.engine.pools import Device, DeviceKey, get

#: the gate's name, as kube-scheduler's ``--feature-gates`` spells it
GATE = "DRADeviceCompatibilityGroups"


@dataclass(frozen=True)
class Intersection:
    """The devices placed on one counter set so far: none, all without groups, or the groups
    every grouped one shares."""

    members: bool = False
    all_empty: bool = False
    groups: frozenset[str] = frozenset()

    def admits(self, groups: frozenset[str]) -> bool:
        if not self.members:
            return True
        if not groups:
            return self.all_empty
        if self.all_empty:
            return False
        return bool(self.groups & groups)

    def add(self, groups: frozenset[str]) -> Intersection:
        if not self.members:
            return Intersection(True, not groups, groups)
        if self.all_empty or not groups:
            return self
        return Intersection(True, False, self.groups & groups)


EMPTY = Intersection()


def device_groups(d: Device) -> list[tuple[str, frozenset[str]]]:
    """(counter set, groups) of each counter consumption of the device, in slice order."""
    return [
        (
            str(get(c, "counterSet", "")),
            frozenset(str(g) for g in get(c, "compatibilityGroups") or ()),
        )
        for c in get(d.raw, "consumesCounters", []) or []
    ]


def baseline(
    devices: Iterable[Device], allocated: Callable[[DeviceKey], bool]
) -> dict[str, Intersection]:
    """Per counter set, the intersection of the pool's ``devices`` that are ``allocated``,
    folded in the order given."""
    out: dict[str, Intersection] = {}
    for d in devices:
        if not d.consumes or not allocated(d.key):
            continue
        for cs, groups in device_groups(d):
            out[cs] = out.get(cs, EMPTY).add(groups)
    return out
