"""What is already taken: devices in use, shared counters consumed, capacity consumed.

Recording a claim costs its own results only: devices are looked up in an index by
(driver, pool, device) that the engine builds once, never rebuilt per commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.engine.pools import Device, DeviceKey, Pool, get
from kubeacc.engine.quantity import parse_quantity

CounterKey = tuple[str, str, str]  # driver, pool, counter set


@dataclass
class Ledger:
    in_use: set[DeviceKey] = field(default_factory=set)
    counters_used: dict[CounterKey, dict[str, Fraction]] = field(default_factory=dict)
    #: shared devices with capacity consumed; what they consume, by the names the results
    #: wrote (:meth:`capacity_of` reads it for one device as a node sees it)
    capacity_used: dict[DeviceKey, dict[str, Fraction]] = field(default_factory=dict)
    counted: set[DeviceKey] = field(default_factory=set)  # devices whose counters are taken

    def counter_free(
        self, pools: Mapping[tuple[str, str], Pool], key: CounterKey
    ) -> dict[str, Fraction] | None:
        pool = pools.get((key[0], key[1]))
        if pool is None or key[2] not in pool.counters:
            return None
        used = self.counters_used.get(key, {})
        return {n: v - used.get(n, Fraction(0)) for n, v in pool.counters[key[2]].items()}

    def capacity_of(self, d: Device) -> dict[str, Fraction]:
        """The capacity of ``d`` that allocated shares consume, by ``d``'s capacity keys: a
        name ``d`` did not write counts against nothing, as in the allocator."""
        written = self.capacity_used.get(d.key)
        if not written:
            return {}
        out: dict[str, Fraction] = {}
        for name, q in written.items():
            cap = d.capacity_key(name)
            if cap is not None:
                out[cap] = out.get(cap, Fraction(0)) + q
        return out

    def record(
        self, results: Iterable[Mapping[str, Any]], by_key: Mapping[DeviceKey, Device]
    ) -> None:
        """Mark the devices of ``status.allocation.devices.results`` as taken."""
        for r in results:
            key = (str(get(r, "driver", "")), str(get(r, "pool", "")), str(get(r, "device", "")))
            if get(r, "adminAccess", False):
                continue  # as kube-scheduler: an admin-access result takes nothing
            dev = by_key.get(key)
            consumed = get(r, "consumedCapacity")
            if get(r, "shareID") is not None:
                # The result names the capacity as the slice wrote it, and the allocator looks
                # that name up on the device each node sees (which may be another generation's
                # device of the same name): resolved per device by capacity_of.
                used = self.capacity_used.setdefault(key, {})
                for name, q in (consumed or {}).items():
                    used[str(name)] = used.get(str(name), Fraction(0)) + parse_quantity(str(q))
            else:
                self.in_use.add(key)
            if dev is not None and key not in self.counted:
                # A shared device's counters are consumed once, however many shares it has.
                self.counted.add(key)
                for cs, counters in dev.consumes:
                    used_c = self.counters_used.setdefault((key[0], key[1], cs), {})
                    for n, v in counters.items():
                        used_c[n] = used_c.get(n, Fraction(0)) + v
