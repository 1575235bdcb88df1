"""Answers shared by claims that differ only in selectors that pick the same devices.

A node's answer to a claim depends on the claim's selectors only through their verdicts on the
node's devices (when none fails): two claims equal but for their selectors, whose selectors
accept the same devices of a node, get the same picks there. The engine remembers a found
allocation under (the claim without its selectors, the verdicts on the node's devices, the node
signature), so a claim with a selector of its own (a pod's template with a per-pod
expression, a user's selector that words another's differently) skips the searches on nodes
that look like ones already answered for another claim with the same verdicts.

Allocations are shared, and a "no" whose reasons quote neither a selector nor a claim (the
explanation's funnel names each selector a request passes); an error never is, and a selector
that fails on a device makes no key (the scheduler's error depends on which device its search
reaches first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubeacc.engine.celenv import CelError, compile_selector
from kubeacc.engine.claims import Claim, DeviceClass
from kubeacc.engine.pools import Device

Verdicts = dict[tuple[tuple[str, ...], tuple[str, ...], str], bool]


def without_selectors(value: Any) -> Any:
    """A claim's ``spec.devices`` with every ``selectors`` list replaced by its length."""
    if isinstance(value, Mapping):
        return {
            k: (len(v) if k == "selectors" and isinstance(v, list) else without_selectors(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [without_selectors(v) for v in value]
    return value


def verdict_vector(
    claims: Sequence[Claim],
    devices: Sequence[Device],
    classes: Mapping[str, DeviceClass],
    verdicts: Verdicts,
    matches: Callable[[str, Device], bool],
) -> tuple[tuple[bool, ...], ...] | None:
    """Per request alternative, whether each device passes its class's and its own selectors
    (the first-fit search's verdicts, computed and recorded where missing); None when a
    selector fails to compile or to evaluate on one of the devices."""
    out: list[tuple[bool, ...]] = []
    for claim in claims:
        for r in claim.requests:
            for alt in r.alternatives:
                cls = classes[alt.device_class]
                row = []
                for d in devices:
                    key = (cls.selectors, alt.selectors, d.fingerprint)
                    v = verdicts.get(key)
                    if v is None:
                        v = _verdict((*cls.selectors, *alt.selectors), d, matches)
                        if v is None:
                            return None
                        verdicts[key] = v
                    row.append(v)
                out.append(tuple(row))
    return tuple(out)


def _verdict(
    selectors: Sequence[str], d: Device, matches: Callable[[str, Device], bool]
) -> bool | None:
    try:
        for expr in selectors:
            compile_selector(expr)
            if not matches(expr, d):
                return False
    except CelError:
        return None
    return True


def shareable_reasons(reasons: Sequence[str]) -> bool:
    """Whether a node's reasons for a "no" read the same for every claim with the key."""
    return not any("selector '" in r or "claim " in r for r in reasons)
