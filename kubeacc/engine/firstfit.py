"""Can this claim be allocated on this node? Answered the way kube-scheduler answers it.

A first-fit, exhaustive backtracking search over the node's pools (driver/pool order), slices
(name order) and devices (slice order), request after request, with kube-scheduler's rules and
quirks (``k8s.io/dynamic-resource-allocation/structured``, the allocator kube-scheduler 1.36
uses with its default feature gates):

* every request and subrequest is validated up front; an ``All`` request, even an untried
  subrequest, fails the claim on the node (error) when a node's pool is incomplete or invalid,
  and evaluates its selectors on every device of the node right away;
* selectors run lazily otherwise, only on devices the search reaches (devices in use are
  skipped before their selectors run); a CEL runtime error aborts the node with an error;
* selectors run before the per-device node check of ``perDeviceNodeSelection`` slices;
* more than 32 devices (counting an ``All`` request's matching devices) is an error; a search
  that would exceed 32 results backtracks;
* ``matchAttribute`` / ``distinctAttribute`` compare typed values as written (``true`` != ``1``,
  versions as strings); ``distinctAttribute`` remembers one value per request;
* a device an ``All`` request cannot add because of a constraint is an error;
* shared counters are checked for admin access too; a shared device whose capacity is already
  in use has its counters taken already; capacity requests are checked on every device;
* when no allocation exists and some pool was invalid, the result is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.engine.celenv import CelError, compile_selector
from kubeacc.engine.claims import ALL, Alternative, Claim, DeviceClass
from kubeacc.engine.nodepools import NodePool, device_node_matches
from kubeacc.engine.pools import Device, DeviceKey, Node
from kubeacc.engine.quantity import parse_quantity
from kubeacc.engine.search import Pick
from kubeacc.engine.state import Ledger

MAX_RESULTS = 32

#: named in explanations where the scheduler deviates from the documented semantics
_UPFRONT = " (kube-scheduler checks every subrequest up front, even ones it would not try)"

#: evaluate one CEL selector on one device: True/False, or raises CelError
Matcher = Callable[[str, Device], bool]


class AllocationError(Exception):
    """What kube-scheduler reports as an error for this node (the claim cannot go there)."""


class _TooMany(Exception):
    pass


@dataclass
class _Constraint:
    requests: frozenset[str]
    attribute: str
    distinct: bool
    value: tuple[str, Any] | None = None
    count: int = 0
    per_request: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def applies(self, alt: Alternative) -> bool:
        return not self.requests or alt.request in self.requests or alt.name in self.requests

    def add(self, alt: Alternative, d: Device) -> bool:
        if not self.applies(alt):
            return True
        v = d.typed_attribute(self.attribute)
        if v is None:
            return False
        if self.distinct:
            if self.count and any(v == other for other in self.per_request.values()):
                return False
            self.per_request[alt.request] = v
        elif self.count == 0:
            self.value = v
        elif v != self.value:
            return False
        self.count += 1
        return True

    def remove(self, alt: Alternative) -> None:
        if not self.applies(alt):
            return
        if self.distinct:
            self.per_request.pop(alt.request, None)
        self.count -= 1


def tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if tol.get("effect") and tol.get("effect") != taint.get("effect"):
        return False
    if tol.get("key") and tol.get("key") != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Equal":
        return bool(tol.get("value", "") == taint.get("value", ""))
    return op == "Exists"


def taint_blocks(d: Device, alt: Alternative) -> bool:
    for t in d.taints:
        if t.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(tol, t) for tol in alt.tolerations
        ):
            return True
    return False


def _consumed(requested: Fraction | None, total: Fraction, policy: Mapping[str, Any]) -> Fraction:
    if requested is None:
        if policy.get("default") is not None:
            return parse_quantity(str(policy["default"]))
        return total
    if not policy:
        return requested
    rng = policy.get("validRange")
    if rng and rng.get("min") is not None:
        lo = parse_quantity(str(rng["min"]))
        if requested < lo:
            return lo
        if rng.get("step") is None:
            return requested
        step = int(parse_quantity(str(rng["step"])))
        added = _ceil_int(requested) - int(lo)
        n = -(-added // step)
        return Fraction(int(lo) + step * n)
    if policy.get("validValues") is not None:
        for v in policy["validValues"]:
            q = parse_quantity(str(v))
            if requested <= q:
                return q
    return requested


def _ceil_int(q: Fraction) -> int:
    return -(-q.numerator // q.denominator)


def _violates(v: Fraction, policy: Mapping[str, Any]) -> bool:
    if not policy:
        return False
    if policy.get("default") is not None and parse_quantity(str(policy["default"])) == v:
        return False
    rng = policy.get("validRange")
    if rng is not None:
        if rng.get("max") is not None and v > parse_quantity(str(rng["max"])):
            return True
        if rng.get("step") is not None:
            lo = int(parse_quantity(str(rng.get("min", "0"))))
            return (_ceil_int(v) - lo) % int(parse_quantity(str(rng["step"]))) != 0
        return False
    values = policy.get("validValues")
    if values:
        return all(parse_quantity(str(x)) != v for x in values)
    return False


def consumption(alt: Alternative, d: Device) -> dict[str, Fraction] | None:
    """Per capacity of ``d``, what one allocation for ``alt`` consumes; None: a requested
    capacity the device lacks (the device is skipped)."""
    requested: dict[str, Fraction] = {}
    for name, q in alt.capacity:
        qn = d.capacity_key(name)
        if qn is None:
            return None
        requested[qn] = q
    return {
        c: _consumed(requested.get(c), total, d.capacity_policy.get(c, {}))
        for c, total in d.capacity.items()
    }


class FirstFit:
    """One claim on one node; :meth:`run` returns the picks, None, or raises AllocationError."""

    def __init__(
        self,
        claim: Claim,
        node: Node,
        pools: Sequence[NodePool],
        classes: Mapping[str, DeviceClass],
        ledger: Ledger,
        matches: Matcher,
        step_limit: int = 200_000,
    ) -> None:
        self.claim = claim
        self.node = node
        self.pools = pools
        self.classes = classes
        self.ledger = ledger
        self.matches = matches
        self.step_limit = step_limit
        self.steps = 0
        self.selectable: dict[tuple[DeviceKey, str], bool] = {}
        #: capacity verdicts of dedicated devices (they do not change during a search)
        self.static_fit: dict[tuple[DeviceKey, str], bool] = {}
        self.all_devices: dict[str, list[Device]] = {}
        self.allocating: set[DeviceKey] = set()
        self.cap_pending: dict[DeviceKey, dict[str, Fraction]] = {}
        self.counters_pending: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.picks: list[Pick] = []
        self.constraints = [
            _Constraint(
                frozenset(c.requests), c.attribute, distinct=c.distinct_attribute is not None
            )
            for c in claim.constraints
        ]
        self.pool_of: dict[tuple[str, str], NodePool] = {(p.driver, p.name): p for p in pools}
        #: usable pools' devices in search order, with their slice's per-device node selection
        self.flat: list[tuple[bool, Device]] = [
            (per_device, d)
            for p in pools
            if not (p.incomplete or p.invalid)
            for per_device, devs in p.slices
            for d in devs
        ]

    # -- selection ----------------------------------------------------------------------
    def _selectable(self, alt: Alternative, d: Device, per_device: bool) -> bool:
        key = (d.key, alt.name)
        hit = self.selectable.get(key)
        if hit is not None:
            return hit
        ok = True
        cls = self.classes[alt.device_class]
        for i, expr in enumerate(cls.selectors):
            if not self._eval(expr, d, f"class {cls.name}: selector #{i}"):
                ok = False
                break
        if ok:
            for i, expr in enumerate(alt.selectors):
                if not self._eval(expr, d, f"claim selector #{i}"):
                    ok = False
                    break
        if ok and per_device:
            ok = device_node_matches(d.raw, self.node)
        self.selectable[key] = ok
        return ok

    def _eval(self, expr: str, d: Device, where: str) -> bool:
        try:
            compile_selector(expr)
        except CelError as e:
            raise AllocationError(f"{where}: CEL compile error: {e}") from None
        try:
            return self.matches(expr, d)
        except CelError as e:
            raise AllocationError(
                f"{where}: CEL runtime error on {d.id}: {e} (kube-scheduler stops at the first "
                "selector error on any device its search reaches)"
            ) from None

    def _capacity_fits(self, alt: Alternative, d: Device) -> bool:
        if not d.allow_multiple:
            key = (d.key, alt.name)
            hit = self.static_fit.get(key)
            if hit is None:
                hit = self.static_fit[key] = self._capacity_check(alt, d)
            return hit
        return self._capacity_check(alt, d)

    def _capacity_check(self, alt: Alternative, d: Device) -> bool:
        if not alt.capacity and not d.capacity_policy and not d.allow_multiple:
            return True
        cons = consumption(alt, d)
        if cons is None:
            return False
        used = self.ledger.capacity_used.get(d.key, {})
        pend = self.cap_pending.get(d.key, {})
        for c, v in cons.items():
            if _violates(v, d.capacity_policy.get(c, {})):
                return False
            if used.get(c, Fraction(0)) + v + pend.get(c, Fraction(0)) > d.capacity[c]:
                return False
        return True

    # -- validation ---------------------------------------------------------------------
    def _validate(self) -> None:
        minimum = 0
        for req in self.claim.requests:
            counts = []
            for alt in req.alternatives:
                if alt.mode == ALL:
                    devs: list[Device] = []
                    for pool in self.pools:
                        if pool.incomplete:
                            raise AllocationError(
                                f"request {alt.name}: asks for all devices, but pool "
                                f"{pool.id} is incomplete (being updated){_UPFRONT}"
                            )
                        if pool.invalid:
                            raise AllocationError(
                                f"request {alt.name}: asks for all devices, but pool "
                                f"{pool.id} is invalid ({pool.invalid}){_UPFRONT}"
                            )
                        for per_device, sdevs in pool.slices:
                            for d in sdevs:
                                if self._selectable(alt, d, per_device) and self._capacity_fits(
                                    alt, d
                                ):
                                    devs.append(d)
                    self.all_devices[alt.name] = devs
                    counts.append(len(devs))
                else:
                    counts.append(alt.count)
            minimum += min(counts)
        if minimum > MAX_RESULTS:
            raise AllocationError(
                f"the claim needs {minimum} devices, more than the limit of {MAX_RESULTS}"
            )

    # -- search -------------------------------------------------------------------------
    def run(self) -> list[Pick] | None:
        self._validate()
        try:
            done = self._request(0)
        except _TooMany:
            done = False
        if done:
            return list(self.picks)
        bad = [p for p in self.pools if p.invalid]
        if bad:
            raise AllocationError(f"pool {bad[0].id} is invalid ({bad[0].invalid})")
        return None

    def _request(self, ri: int) -> bool:
        if ri == len(self.claim.requests):
            return True
        req = self.claim.requests[ri]
        if not req.first_available:
            return self._alt(req.alternatives[0], ri, 0, 0)
        all_too_many = True
        for alt in req.alternatives:
            try:
                ok = self._alt(alt, ri, 0, 0)
            except _TooMany:
                continue
            all_too_many = False
            if ok:
                return True
        if all_too_many:
            raise _TooMany
        return False

    def _alt(self, alt: Alternative, ri: int, k: int, start: int) -> bool:
        self.steps += 1
        if self.steps > self.step_limit:
            raise AllocationError(f"search stopped after {self.step_limit} steps")
        if alt.mode == ALL:
            devs = self.all_devices[alt.name]
            if not devs:
                return False
            need = len(devs)
        else:
            need = alt.count
        if k >= need:
            return self._request(ri + 1)
        if len(self.picks) + need - k > MAX_RESULTS:
            raise _TooMany
        if alt.mode == ALL:
            d = self.all_devices[alt.name][k]
            undo = self._allocate(alt, d, must=True)
            if undo is None:
                return False
            if self._alt(alt, ri, k + 1, start):
                return True
            undo()
            return False
        if need - k > 1 and self._hopeless(alt, start, need - k):
            return False
        for j in range(start, len(self.flat)):
            per_device, d = self.flat[j]
            if alt.admin_access and d.key in self.allocating:
                continue
            if not alt.admin_access and self._in_use(d):
                continue
            if not self._selectable(alt, d, per_device):
                continue
            if not self._capacity_fits(alt, d):
                continue
            undo = self._allocate(alt, d, must=False)
            if undo is None:
                continue
            if self._alt(alt, ri, k + 1, j + 1):
                return True
            undo()
        return False

    def _hopeless(self, alt: Alternative, start: int, need: int) -> bool:
        """Fewer devices left than still needed, judged only from verdicts already known:
        cutting the branch then skips no selector the scheduler would have run."""
        possible = 0
        for j in range(start, len(self.flat)):
            d = self.flat[j][1]
            if alt.admin_access and d.key in self.allocating:
                continue
            if not alt.admin_access and self._in_use(d):
                continue
            verdict = self.selectable.get((d.key, alt.name))
            if verdict is None:
                return False
            if verdict:
                possible += 1
                if possible >= need:
                    return False
        return True

    def _in_use(self, d: Device) -> bool:
        return d.key in self.ledger.in_use or d.key in self.allocating

    def _allocate(self, alt: Alternative, d: Device, must: bool) -> Callable[[], None] | None:
        shared = d.allow_multiple
        if not shared and alt.admin_access and d.key in self.allocating:
            return None
        if not alt.admin_access and self._in_use(d):
            return None
        undo: list[Callable[[], None]] = []

        def rollback() -> None:
            for fn in reversed(undo):
                fn()

        in_use = d.key in self.ledger.capacity_used or d.key in self.cap_pending
        if not (shared and in_use) and d.consumes:
            if not self._reserve_counters(d):
                return None
            undo.append(lambda: self._release_counters(d))
        if taint_blocks(d, alt):
            rollback()
            return None
        for c in self.constraints:
            if not c.add(alt, d):
                rollback()
                if must:
                    raise AllocationError(
                        f"request {alt.name}: cannot add device {d.id} because a claim "
                        "constraint would not be satisfied"
                    )
                return None
            undo.append(lambda c=c: c.remove(alt))  # type: ignore[misc]
        if not shared:
            self.allocating.add(d.key)
            undo.append(lambda: self.allocating.discard(d.key))
        if not self._capacity_fits(alt, d):
            rollback()
            return None
        consumed = None
        if shared:
            consumed = consumption(alt, d) or {}
            existed = d.key in self.cap_pending
            pend = self.cap_pending.setdefault(d.key, {})
            for cap, v in consumed.items():
                pend[cap] = pend.get(cap, Fraction(0)) + v

            def uncap(cons: dict[str, Fraction] = consumed) -> None:
                if not existed:
                    del self.cap_pending[d.key]
                    return
                for c2, v2 in cons.items():
                    pend[c2] -= v2

            undo.append(uncap)
        self.picks.append(Pick(alt, d, consumed))
        undo.append(self._pop_pick)
        return rollback

    def _pop_pick(self) -> None:
        self.picks.pop()

    def _available(self, pool: NodePool) -> dict[str, dict[str, Fraction]]:
        out = {}
        for cs, counters in pool.counters.items():
            used = self.ledger.counters_used.get((pool.driver, pool.name, cs), {})
            out[cs] = {n: v - used.get(n, Fraction(0)) for n, v in counters.items()}
        return out

    def _reserve_counters(self, d: Device) -> bool:
        pool = self.pool_of[(d.driver, d.pool)]
        pending = self.counters_pending.setdefault(pool.name, {})
        for cs, counters in d.consumes:
            ps = pending.setdefault(cs, {})
            for n, v in counters.items():
                ps[n] = ps.get(n, Fraction(0)) + v
        for cs, counters in self._available(pool).items():
            ps = pending.get(cs, {})
            for n, v in counters.items():
                if v < ps.get(n, Fraction(0)):
                    self._release_counters(d)
                    return False
        return True

    def _release_counters(self, d: Device) -> None:
        pending = self.counters_pending[d.pool]
        for cs, counters in d.consumes:
            for n, v in counters.items():
                pending[cs][n] -= v

    def replay(self, picks: Sequence[Pick]) -> list[Pick] | None:
        """Whether another search's picks are an allocation the scheduler could make: each
        request (one subrequest of a firstAvailable) fully served, in request order, every
        device usable and every rule above kept. Returns the picks as this search would
        record them, or None."""
        self._validate()
        i = 0
        for req in self.claim.requests:
            if i >= len(picks):
                return None
            alt = picks[i].alt
            if alt.request != req.name or alt not in req.alternatives:
                return None
            need = len(self.all_devices[alt.name]) if alt.mode == ALL else alt.count
            group = picks[i : i + need]
            if len(group) != need or any(p.alt != alt for p in group):
                return None
            if alt.mode == ALL and {p.device.key for p in group} != {
                d.key for d in self.all_devices[alt.name]
            }:
                return None
            for p in group:
                found = self._node_device(p.device.key)
                if found is None:
                    return None
                per_device, d = found
                if not self._selectable(alt, d, per_device) or not self._capacity_fits(alt, d):
                    return None
                if self._allocate(alt, d, must=False) is None:
                    return None
            i += need
        if i != len(picks) or len(picks) > MAX_RESULTS:
            return None
        return list(self.picks)

    def _node_device(self, key: DeviceKey) -> tuple[bool, Device] | None:
        pool = self.pool_of.get((key[0], key[1]))
        if pool is None or pool.incomplete or pool.invalid:
            return None
        for per_device, devs in pool.slices:
            for d in devs:
                if d.name == key[2]:
                    return per_device, d
        return None
