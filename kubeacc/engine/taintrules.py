"""DeviceTaintRules as kube-scheduler sees them: each rule's taint added to the devices it
selects, before allocation.

kube-scheduler reads ResourceSlices through a tracker that appends the taint of every
DeviceTaintRule whose ``deviceSelector`` matches (driver, pool and device name, each optional;
a rule without a selector matches nothing) to the device's own taints, in the rules' order.
The allocator then treats a rule's ``NoSchedule``/``NoExecute`` taint like a device's own:
the device is skipped unless the request tolerates it. Slices a rule does not touch are
returned as they are; touched ones are copies, so the input is never modified.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any


def _matches(selector: Mapping[str, Any], driver: object, pool: object) -> bool:
    d, p = selector.get("driver"), selector.get("pool")
    return (d is None or d == driver) and (p is None or p == pool)


def apply_taint_rules(
    slices: Sequence[dict[str, Any]], rules: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The slices with each rule's taint appended to the devices the rule selects."""
    active = [
        r
        for r in rules
        if isinstance((r.get("spec") or {}).get("deviceSelector"), Mapping)
        and isinstance((r.get("spec") or {}).get("taint"), Mapping)
    ]
    if not active:
        return list(slices)
    out = []
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
        patched: dict[str, Any] | None = None
        for rule in active:
            selector, taint = rule["spec"]["deviceSelector"], rule["spec"]["taint"]
            if not _matches(selector, driver, pool):
                continue
            for i, dev in enumerate(spec.get("devices") or []):
                if selector.get("device") is not None and selector["device"] != dev.get("name"):
                    continue
                if patched is None:
                    patched = copy.deepcopy(s)
                target = patched["spec"]["devices"][i]
                target["taints"] = [*(target.get("taints") or []), dict(taint)]
        out.append(patched if patched is not None else s)
    return out
