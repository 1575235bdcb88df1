"""What is already taken: devices in use, shared counters consumed, capacity consumed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.engine.pools import DeviceKey, Pool, get
from kubeacc.engine.quantity import parse_quantity

CounterKey = tuple[str, str, str]  # driver, pool, counter set


@dataclass
class Ledger:
    in_use: set[DeviceKey] = field(default_factory=set)
    counters_used: dict[CounterKey, dict[str, Fraction]] = field(default_factory=dict)
    capacity_used: dict[DeviceKey, dict[str, Fraction]] = field(default_factory=dict)

    def counter_free(
        self, pools: Mapping[tuple[str, str], Pool], key: CounterKey
    ) -> dict[str, Fraction] | None:
        pool = pools.get((key[0], key[1]))
        if pool is None or key[2] not in pool.counters:
            return None
        used = self.counters_used.get(key, {})
        return {n: v - used.get(n, Fraction(0)) for n, v in pool.counters[key[2]].items()}

    def record(
        self, results: Iterable[Mapping[str, Any]], pools: Mapping[tuple[str, str], Pool]
    ) -> None:
        """Mark the devices of ``status.allocation.devices.results`` as taken."""
        by_key = {d.key: d for p in pools.values() for d in p.devices}
        for r in results:
            key = (str(get(r, "driver", "")), str(get(r, "pool", "")), str(get(r, "device", "")))
            if get(r, "adminAccess", False):
                continue
            dev = by_key.get(key)
            consumed = get(r, "consumedCapacity")
            if dev is not None and dev.allow_multiple:
                used = self.capacity_used.setdefault(key, {})
                for name, q in (consumed or {}).items():
                    used[name] = used.get(name, Fraction(0)) + parse_quantity(str(q))
            else:
                self.in_use.add(key)
            if dev is not None:
                for cs, counters in dev.consumes:
                    used_c = self.counters_used.setdefault((key[0], key[1], cs), {})
                    for n, v in counters.items():
                        used_c[n] = used_c.get(n, Fraction(0)) + v
