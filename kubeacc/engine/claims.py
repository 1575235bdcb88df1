"""ResourceClaims and DeviceClasses read from API-shaped dicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kubeacc.engine.pools import get
from kubeacc.engine.quantity import QuantityError, parse_quantity

EXACT_COUNT = "ExactCount"
ALL = "All"


class ClaimError(ValueError):
    """The claim (or a class it names) cannot be handled at all."""


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    config: tuple[dict[str, Any], ...]

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> DeviceClass:
        spec = get(obj, "spec", {})
        return cls(
            str(get(get(obj, "metadata", {}), "name", "")),
            _selectors(get(spec, "selectors", [])),
            tuple(dict(c) for c in get(spec, "config", []) or []),
        )


def _selectors(raw: Any) -> tuple[str, ...]:
    out = []
    for s in raw or []:
        expr = get(get(s, "cel", {}), "expression")
        if expr is None:
            raise ClaimError(f"selector without a CEL expression: {s!r}")
        out.append(str(expr))
    return tuple(out)


@dataclass(frozen=True)
class Alternative:
    """One way to satisfy a request: the request itself or one of its subrequests."""

    name: str  # as it appears in results: "gpus" or "gpus/large"
    request: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    admin_access: bool
    capacity: tuple[tuple[str, Fraction], ...]
    tolerations: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Alternative, ...]
    first_available: bool


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...]  # empty: all requests
    match_attribute: str | None
    distinct_attribute: str | None

    def applies(self, alt: Alternative) -> bool:
        return not self.requests or alt.request in self.requests or alt.name in self.requests

    @property
    def attribute(self) -> str:
        return self.match_attribute or self.distinct_attribute or ""

    def label(self) -> str:
        kind = "matchAttribute" if self.match_attribute else "distinctAttribute"
        return f"{kind} {self.attribute}"


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...]
    config: tuple[dict[str, Any], ...]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _alternative(
    name: str, request: str, raw: Mapping[str, Any], *, subrequest: bool = False
) -> Alternative:
    mode = str(get(raw, "allocationMode", EXACT_COUNT))
    if mode not in (EXACT_COUNT, ALL):
        raise ClaimError(f"request {name}: unknown allocationMode {mode!r}")
    count = int(get(raw, "count", 1)) if mode == EXACT_COUNT else 0
    if mode == EXACT_COUNT and count < 1:
        raise ClaimError(f"request {name}: count must be at least 1")
    cls = get(raw, "deviceClassName")
    if not cls:
        raise ClaimError(f"request {name}: no deviceClassName")
    caps: list[tuple[str, Fraction]] = []
    for k, v in (get(get(raw, "capacity", {}), "requests", {}) or {}).items():
        try:
            caps.append((str(k), parse_quantity(str(v))))
        except QuantityError as e:
            raise ClaimError(f"request {name}: capacity {k}: {e}") from None
    return Alternative(
        name=name,
        request=request,
        device_class=str(cls),
        selectors=_selectors(get(raw, "selectors", [])),
        mode=mode,
        count=count,
        # A v1 subrequest has no adminAccess field: the API drops it, so does the engine.
        admin_access=not subrequest and bool(get(raw, "adminAccess", False)),
        capacity=tuple(caps),
        tolerations=tuple(dict(t) for t in get(raw, "tolerations", []) or []),
    )


def parse_claim(obj: Mapping[str, Any]) -> Claim:
    """A ResourceClaim (``spec.devices``) in the v1 shape (``exactly`` / ``firstAvailable``)."""
    meta = get(obj, "metadata", {})
    devices = get(get(obj, "spec", {}), "devices", {})
    requests = []
    for raw in get(devices, "requests", []) or []:
        name = str(get(raw, "name", ""))
        exactly = get(raw, "exactly")
        first = get(raw, "firstAvailable")
        if exactly is not None and first:
            raise ClaimError(f"request {name}: both exactly and firstAvailable")
        if first:
            alts = tuple(
                _alternative(f"{name}/{get(s, 'name', '')}", name, s, subrequest=True)
                for s in first
            )
            requests.append(Request(name, alts, True))
        elif exactly is not None:
            requests.append(Request(name, (_alternative(name, name, exactly),), False))
        elif get(raw, "deviceClassName"):  # v1beta1 shape: fields directly in the request
            requests.append(Request(name, (_alternative(name, name, raw),), False))
        else:
            raise ClaimError(f"request {name}: neither exactly nor firstAvailable")
    names = {r.name for r in requests} | {a.name for r in requests for a in r.alternatives}
    constraints = []
    for raw in get(devices, "constraints", []) or []:
        reqs = tuple(str(r) for r in get(raw, "requests", []) or [])
        for r in reqs:
            if r not in names:
                raise ClaimError(f"constraint names unknown request {r!r}")
        match = get(raw, "matchAttribute")
        distinct = get(raw, "distinctAttribute")
        if not match and not distinct:
            continue  # a constraint kind this engine does not know: nothing to enforce
        constraints.append(Constraint(reqs, match, distinct))
    return Claim(
        namespace=str(get(meta, "namespace", "")),
        name=str(get(meta, "name", "")),
        uid=str(get(meta, "uid", "")),
        requests=tuple(requests),
        constraints=tuple(constraints),
        config=tuple(dict(c) for c in get(devices, "config", []) or []),
    )
