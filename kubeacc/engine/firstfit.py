"""Can these claims (one pod's) be allocated on this node? Answered the way kube-scheduler
answers it.

A first-fit, exhaustive backtracking search over the node's pools (driver/pool order, pools with
binding conditions last), slices (name order) and devices (slice order), claim after claim and
request after request, backtracking across claims like kube-scheduler, which allocates all of a
pod's pending claims in one call, with kube-scheduler's rules and quirks
(``k8s.io/dynamic-resource-allocation/structured``, the allocator kube-scheduler uses with its
feature gates, as of the :class:`~kubeacc.engine.release.Release` given: v1.36 or v1.37):

* every request and subrequest is validated up front; an ``All`` request, even an untried
  subrequest, fails the claim on the node (error) when a node's pool is incomplete or invalid,
  and evaluates its selectors on every device of the node right away;
* selectors run lazily otherwise, only on devices the search reaches (devices in use are
  skipped before their selectors run); a CEL runtime error aborts the node with an error;
* selectors run before the per-device node check of ``perDeviceNodeSelection`` slices;
* more than 32 devices (counting an ``All`` request's matching devices) is an error; a search
  that would exceed 32 results backtracks;
* ``matchAttribute`` / ``distinctAttribute`` compare typed values as written (``true`` != ``1``,
  versions as strings); ``distinctAttribute`` remembers one value per request (v1.36; v1.37
  compares with every device added);
* a device an ``All`` request cannot add because of a constraint is an error; v1.37 gathers an
  ``All`` request's devices by static capacity (a device whose capacity is taken fails it);
* shared counters are checked for admin access too; a shared device whose capacity is already
  in use has its counters taken already; capacity requests are checked on every device;
* with DRADeviceCompatibilityGroups on, a device that consumes counters is checked against the
  compatibility groups of the devices on each of its counter sets first (allocated ones, then
  the search's own; :mod:`kubeacc.engine.compatgroups`), under the same exemption;
* when no allocation exists and some pool was invalid, the result is an error for this node
  only (the scheduler tries other nodes); every other error fails the whole pod (the
  scheduler's Filter returns an error status: the pod is retried, placed nowhere);
* the 32-result limit counts per claim; a claim past it makes the search go back into the
  claims before it, but the first claim past it is an error;
* a device an admin-access request takes is only off limits to other admin-access requests of
  the same claim; a device any claim of the pod takes is in use for the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.engine.capacitypolicy import CapacityError, consumption, violates
from kubeacc.engine.celenv import CelError, compile_selector
from kubeacc.engine.claims import ALL, Alternative, Claim, DeviceClass
from kubeacc.engine.compatgroups import EMPTY, Intersection, baseline, device_groups
from kubeacc.engine.nodepools import NodePool, device_node_matches
from kubeacc.engine.pools import Device, DeviceKey, Node
from kubeacc.engine.release import Release
from kubeacc.engine.release import release as default_release
from kubeacc.engine.search import Pick
from kubeacc.engine.state import Ledger

MAX_RESULTS = 32

#: named in explanations where the scheduler deviates from the documented semantics
_UPFRONT = " (kube-scheduler checks every subrequest up front, even ones it would not try)"

#: evaluate one CEL selector on one device: True/False, or raises CelError
Matcher = Callable[[str, Device], bool]


class AllocationError(Exception):
    """What kube-scheduler reports as an error. ``fatal``: the error fails the whole pod (the
    scheduler's Filter returns an error status); otherwise only this node is ruled out."""

    def __init__(self, message: str, *, fatal: bool = True) -> None:
        super().__init__(message)
        self.fatal = fatal


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
    #: ``distinctAttribute`` compares with the value of every device added (v1.37), not with
    #: one remembered value per request (v1.36, where a request's later device replaces it)
    every_value: bool = False
    values: list[tuple[str, Any]] = field(default_factory=list)

    def applies(self, alt: Alternative) -> bool:
        return not self.requests or alt.request in self.requests or alt.name in self.requests

    def add(self, alt: Alternative, d: Device) -> bool:
        if not self.applies(alt):
            return True
        v = d.typed_attribute(self.attribute)
        if v is None:
            return False
        if self.distinct and self.every_value:
            if v in self.values:
                return False
            self.values.append(v)
        elif self.distinct:
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
        if self.distinct and self.every_value:
            self.values.pop()
        elif self.distinct:
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


class FirstFit:
    """One pod's claims on one node; :meth:`run` returns the picks per claim, None, or raises
    AllocationError."""

    def __init__(
        self,
        claims: Sequence[Claim],
        node: Node,
        pools: Sequence[NodePool],
        classes: Mapping[str, DeviceClass],
        ledger: Ledger,
        matches: Matcher,
        step_limit: int = 200_000,
        verdicts: dict[tuple[tuple[str, ...], tuple[str, ...], str], bool] | None = None,
        release: Release | None = None,
    ) -> None:
        self.release = release or default_release()
        self.claims = list(claims)
        self.node = node
        self.pools = pools
        self.classes = classes
        self.ledger = ledger
        self.matches = matches
        self.step_limit = step_limit
        #: selector verdicts shared across nodes: (class selectors, request selectors, device
        #: fingerprint) -> True/False; only verdicts, never errors (an error names the device
        #: that raised it, so it is evaluated again)
        self.verdicts = verdicts if verdicts is not None else {}
        self.steps = 0
        #: selector verdicts per (device, claim index, alternative)
        self.selectable: dict[tuple[DeviceKey, int, str], bool] = {}
        #: capacity verdicts of dedicated devices (they do not change during a search)
        self.static_fit: dict[tuple[DeviceKey, int, str], bool] = {}
        self.all_devices: dict[tuple[int, str], list[Device]] = {}
        #: devices being allocated, with the claims (indices) that take them
        self.allocating: dict[DeviceKey, set[int]] = {}
        self.cap_pending: dict[DeviceKey, dict[str, Fraction]] = {}
        #: counters being taken, per pool name (v1.36: pools of one name share them across
        #: drivers) or per (driver, pool) (v1.37)
        self.counters_pending: dict[Any, dict[str, dict[str, Fraction]]] = {}
        #: compatibility groups per (driver, pool) and counter set: those the search is adding
        #: on top of the allocated devices' (the baseline, computed once per pool)
        self.counters_free: dict[tuple[str, str], dict[str, dict[str, Fraction]]] = {}
        self.groups_running: dict[tuple[str, str], dict[str, Intersection]] = {}
        self.groups_baseline: dict[tuple[str, str], dict[str, Intersection]] = {}
        self.picks: list[list[Pick]] = [[] for _ in self.claims]
        self.constraints = [
            [
                _Constraint(
                    frozenset(c.requests),
                    c.attribute,
                    distinct=c.distinct_attribute is not None,
                    every_value=self.release.distinct_every_value,
                )
                for c in claim.constraints
            ]
            for claim in self.claims
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
    def _selectable(self, ci: int, alt: Alternative, d: Device, per_device: bool) -> bool:
        key = (d.key, ci, alt.name)
        hit = self.selectable.get(key)
        if hit is not None:
            return hit
        cls = self.classes[alt.device_class]
        vkey = (cls.selectors, alt.selectors, d.fingerprint)
        verdict = self.verdicts.get(vkey)
        if verdict is None:
            verdict = self._selected(ci, alt, d)
            self.verdicts[vkey] = verdict
        ok = verdict
        if ok and per_device:
            ok = device_node_matches(d.raw, self.node)
        self.selectable[key] = ok
        return ok

    def _selected(self, ci: int, alt: Alternative, d: Device) -> bool:
        """The class's and the request's selectors on the device, in the allocator's order."""
        cls = self.classes[alt.device_class]
        for i, expr in enumerate(cls.selectors):
            if not self._eval(expr, d, f"class {cls.name}: selector #{i}"):
                return False
        for i, expr in enumerate(alt.selectors):
            if not self._eval(expr, d, f"claim {self.claims[ci].ref}: selector #{i}"):
                return False
        return True

    def _eval(self, expr: str, d: Device, where: str) -> bool:
        try:
            compile_selector(expr, self.release.name)
        except CelError as e:
            raise AllocationError(f"{where}: CEL compile error: {e}") from None
        try:
            return self.matches(expr, d)
        except CelError as e:
            raise AllocationError(
                f"{where}: CEL runtime error on {d.id}: {e} (kube-scheduler stops at the first "
                "selector error on any device its search reaches)"
            ) from None

    def _capacity_fits(self, ci: int, alt: Alternative, d: Device) -> bool:
        if not d.allow_multiple:
            key = (d.key, ci, alt.name)
            hit = self.static_fit.get(key)
            if hit is None:
                hit = self.static_fit[key] = self._capacity_check(ci, alt, d)
            return hit
        return self._capacity_check(ci, alt, d)

    def _all_capacity_fits(self, ci: int, alt: Alternative, d: Device) -> bool:
        """Whether an ``All`` request gathers the device: v1.37 looks at its static capacity
        only (a device whose capacity is taken stays in the set, and the request then fails);
        v1.36 at what is left of it (such a device is skipped)."""
        if self.release.all_static_capacity:
            return self._capacity_check(ci, alt, d, static=True)
        return self._capacity_fits(ci, alt, d)

    def _capacity_check(self, ci: int, alt: Alternative, d: Device, static: bool = False) -> bool:
        strict = self.release.capacity_errors_fail_pod
        if (
            not alt.capacity
            and not d.capacity_policy
            and not d.allow_multiple
            and not (strict and d.negative_capacity)
            # shares of a device of this name (another generation's, which may allow them)
            # consume its capacity too: the allocator checks every device against them
            and d.key not in self.ledger.capacity_used
        ):
            return True
        try:
            cons = consumption(alt, d, strict)
        except CapacityError as e:
            raise AllocationError(
                f"claim {self.claims[ci].ref}, request {alt.name}: checking capacity for "
                f"device {d.id}: {e}"
            ) from None
        if cons is None:
            return False
        none: dict[str, Fraction] = {}
        used = none if static else self.ledger.capacity_of(d)
        pend = none if static else self.cap_pending.get(d.key, {})
        for c, v in cons.items():
            if violates(v, d.capacity_policy.get(c, {})):
                return False
            if used.get(c, Fraction(0)) + v + pend.get(c, Fraction(0)) > d.capacity[c]:
                return False
        return True

    # -- validation ---------------------------------------------------------------------
    def _validate(self) -> None:
        for ci, claim in enumerate(self.claims):
            minimum = 0
            for req in claim.requests:
                counts = []
                for alt in req.alternatives:
                    if alt.mode == ALL:
                        devs: list[Device] = []
                        for pool in self.pools:
                            if pool.incomplete:
                                raise AllocationError(
                                    f"claim {claim.ref}, request {alt.name}: asks for all "
                                    f"devices, but pool {pool.id} is incomplete (being updated)"
                                    f"{_UPFRONT}"
                                )
                            if pool.invalid:
                                raise AllocationError(
                                    f"claim {claim.ref}, request {alt.name}: asks for all "
                                    f"devices, but pool {pool.id} is invalid ({pool.invalid})"
                                    f"{_UPFRONT}"
                                )
                            for per_device, sdevs in pool.slices:
                                for d in sdevs:
                                    if self._selectable(
                                        ci, alt, d, per_device
                                    ) and self._all_capacity_fits(ci, alt, d):
                                        devs.append(d)
                        self.all_devices[(ci, alt.name)] = devs
                        counts.append(len(devs))
                    else:
                        counts.append(alt.count)
                minimum += min(counts)
            if minimum > MAX_RESULTS:
                raise AllocationError(
                    f"claim {claim.ref} needs {minimum} devices, more than the limit of "
                    f"{MAX_RESULTS}"
                )

    # -- search -------------------------------------------------------------------------
    def run(self) -> list[list[Pick]] | None:
        """The picks of every claim (in claim order), or None when the node cannot take
        them all."""
        self._validate()
        if not self.claims:
            return []
        try:
            done = self._request(0, 0)
        except _TooMany:
            raise AllocationError(
                f"claim {self.claims[0].ref}: every way to allocate it needs more than "
                f"{MAX_RESULTS} devices (kube-scheduler's allocator stops with 'allocation max "
                "size exceeded')"
            ) from None
        if done:
            return [list(p) for p in self.picks]
        bad = [p for p in self.pools if p.invalid]
        if bad:
            raise AllocationError(f"pool {bad[0].id} is invalid ({bad[0].invalid})", fatal=False)
        return None

    def _request(self, ci: int, ri: int) -> bool:
        claim = self.claims[ci]
        if ri == len(claim.requests):
            if ci + 1 == len(self.claims):
                return True
            try:
                return self._request(ci + 1, 0)
            except _TooMany:
                # a later claim past the limit: other picks for this one may leave it room
                return False
        req = claim.requests[ri]
        if not req.first_available:
            return self._alt(ci, req.alternatives[0], ri, 0, 0)
        all_too_many = True
        for alt in req.alternatives:
            try:
                ok = self._alt(ci, alt, ri, 0, 0)
            except _TooMany:
                continue
            all_too_many = False
            if ok:
                return True
        if all_too_many:
            raise _TooMany
        return False

    def _alt(self, ci: int, alt: Alternative, ri: int, k: int, start: int) -> bool:
        self.steps += 1
        if self.steps > self.step_limit:
            raise AllocationError(f"search stopped after {self.step_limit} steps")
        if alt.mode == ALL:
            devs = self.all_devices[(ci, alt.name)]
            if not devs:
                return False
            need = len(devs)
        else:
            need = alt.count
        if k >= need:
            return self._request(ci, ri + 1)
        if len(self.picks[ci]) + need - k > MAX_RESULTS:
            raise _TooMany
        if alt.mode == ALL:
            d = self.all_devices[(ci, alt.name)][k]
            undo = self._allocate(ci, alt, d, must=True)
            if undo is None:
                return False
            return self._deeper(undo, ci, alt, ri, k + 1, start)
        if need - k > 1 and self._hopeless(ci, alt, start, need - k):
            return False
        for j in range(start, len(self.flat)):
            per_device, d = self.flat[j]
            if alt.admin_access and ci in self.allocating.get(d.key, ()):
                continue
            if not alt.admin_access and self._in_use(d):
                continue
            if not self._selectable(ci, alt, d, per_device):
                continue
            if not self._capacity_fits(ci, alt, d):
                continue
            undo = self._allocate(ci, alt, d, must=False)
            if undo is None:
                continue
            if self._deeper(undo, ci, alt, ri, k + 1, j + 1):
                return True
        return False

    def _deeper(
        self, undo: Callable[[], None], ci: int, alt: Alternative, ri: int, k: int, start: int
    ) -> bool:
        """Go on from a tentative pick; it is taken back unless a full allocation follows
        (also when the search past it stops with the result limit, which an earlier request
        or claim may still get round)."""
        try:
            done = self._alt(ci, alt, ri, k, start)
        except _TooMany:
            undo()
            raise
        if not done:
            undo()
        return done

    def _hopeless(self, ci: int, alt: Alternative, start: int, need: int) -> bool:
        """Fewer devices left than still needed, judged only from verdicts already known:
        cutting the branch then skips no selector the scheduler would have run."""
        possible = 0
        for j in range(start, len(self.flat)):
            d = self.flat[j][1]
            if alt.admin_access and ci in self.allocating.get(d.key, ()):
                continue
            if not alt.admin_access and self._in_use(d):
                continue
            verdict = self.selectable.get((d.key, ci, alt.name))
            if verdict is None:
                return False
            if verdict:
                possible += 1
                if possible >= need:
                    return False
        return True

    def _in_use(self, d: Device) -> bool:
        return d.key in self.ledger.in_use or bool(self.allocating.get(d.key))

    def _allocate(
        self, ci: int, alt: Alternative, d: Device, must: bool
    ) -> Callable[[], None] | None:
        shared = d.allow_multiple
        if not shared and alt.admin_access and ci in self.allocating.get(d.key, ()):
            return None
        if not alt.admin_access and self._in_use(d):
            return None
        undo: list[Callable[[], None]] = []

        def rollback() -> None:
            for fn in reversed(undo):
                fn()

        in_use = d.key in self.ledger.capacity_used or d.key in self.cap_pending
        if not (shared and in_use) and d.consumes:
            if self.release.compatibility_groups:
                restore = self._consume_groups(d)
                if restore is None:
                    return None
                undo.append(restore)
            if not self._reserve_counters(d):
                rollback()
                return None
            undo.append(lambda: self._release_counters(d))
        if taint_blocks(d, alt):
            rollback()
            return None
        for c in self.constraints[ci]:
            if not c.add(alt, d):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {self.claims[ci].ref}, request {alt.name}: cannot add device "
                        f"{d.id} because a claim constraint would not be satisfied"
                    )
                return None
            undo.append(lambda c=c: c.remove(alt))  # type: ignore[misc]
        if not shared:
            self.allocating.setdefault(d.key, set()).add(ci)
            undo.append(lambda: self._unmark(d.key, ci))
        if not self._capacity_fits(ci, alt, d):
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
        picks = self.picks[ci]
        picks.append(Pick(alt, d, consumed))
        undo.append(lambda: self._pop_pick(ci))
        return rollback

    def _pop_pick(self, ci: int) -> None:
        self.picks[ci].pop()

    def _unmark(self, key: DeviceKey, ci: int) -> None:
        claims = self.allocating[key]
        claims.discard(ci)
        if not claims:
            del self.allocating[key]

    def _available(self, pool: NodePool) -> dict[str, dict[str, Fraction]]:
        """What the pool's counter sets have left after the allocated devices of the pool as
        the node sees it (computed once: allocations do not change during a search)."""
        hit = self.counters_free.get((pool.driver, pool.name))
        if hit is None:
            taken = pool.counters_used(self._allocated)
            hit = {}
            for cs, counters in pool.counters.items():
                used = taken.get(cs, {})
                hit[cs] = {n: v - used.get(n, Fraction(0)) for n, v in counters.items()}
            self.counters_free[(pool.driver, pool.name)] = hit
        return hit

    def _reserve_counters(self, d: Device) -> bool:
        pool = self.pool_of[(d.driver, d.pool)]
        pending = self.counters_pending.setdefault(self._counter_key(d), {})
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

    def _consume_groups(self, d: Device) -> Callable[[], None] | None:
        """Fold the device's groups into each counter set it consumes, or None (nothing
        changed) when a set's devices so far share none of them."""
        pid = (d.driver, d.pool)
        running = self.groups_running.setdefault(pid, {})
        base = self.groups_baseline.get(pid)
        if base is None:
            pool = self.pool_of[pid]
            base = self.groups_baseline[pid] = baseline(pool.all_devices(), self._allocated)
        saved: list[tuple[str, Intersection | None]] = []

        def restore() -> None:
            for cs, prev in reversed(saved):
                if prev is None:
                    running.pop(cs, None)
                else:
                    running[cs] = prev

        for cs, groups in device_groups(d):
            prev = running.get(cs)
            cur = prev if prev is not None else base.get(cs, EMPTY)
            if not cur.admits(groups):
                restore()
                return None
            saved.append((cs, prev))
            running[cs] = cur.add(groups)
        return restore

    def _allocated(self, key: DeviceKey) -> bool:
        """Allocated before this search (the allocator's IsDeviceAllocated)."""
        return key in self.ledger.in_use or key in self.ledger.capacity_used

    def _counter_key(self, d: Device) -> Any:
        return (d.driver, d.pool) if self.release.counters_per_driver else d.pool

    def _release_counters(self, d: Device) -> None:
        pending = self.counters_pending[self._counter_key(d)]
        for cs, counters in d.consumes:
            for n, v in counters.items():
                pending[cs][n] -= v

    def replay(self, picks: Sequence[Pick]) -> list[Pick] | None:
        """Whether another search's picks for the (single) claim are an allocation the
        scheduler could make: each request (one subrequest of a firstAvailable) fully served,
        in request order, every device usable and every rule above kept. Returns the picks as
        this search would record them, or None."""
        assert len(self.claims) == 1
        self._validate()
        i = 0
        for req in self.claims[0].requests:
            if i >= len(picks):
                return None
            alt = picks[i].alt
            if alt.request != req.name or alt not in req.alternatives:
                return None
            need = len(self.all_devices[(0, alt.name)]) if alt.mode == ALL else alt.count
            group = picks[i : i + need]
            if len(group) != need or any(p.alt != alt for p in group):
                return None
            if alt.mode == ALL and {p.device.key for p in group} != {
                d.key for d in self.all_devices[(0, alt.name)]
            }:
                return None
            for p in group:
                found = self._node_device(p.device.key)
                if found is None:
                    return None
                per_device, d = found
                if not self._selectable(0, alt, d, per_device):
                    return None
                try:
                    fits = self._capacity_fits(0, alt, d)
                except AllocationError:
                    # a device whose capacity check fails the pod when the scheduler's search
                    # reaches it: not an allocation the scheduler makes
                    return None
                if not fits:
                    return None
                if self._allocate(0, alt, d, must=False) is None:
                    return None
            i += need
        if i != len(picks) or len(picks) > MAX_RESULTS:
            return None
        return list(self.picks[0])

    def _node_device(self, key: DeviceKey) -> tuple[bool, Device] | None:
        pool = self.pool_of.get((key[0], key[1]))
        if pool is None or pool.incomplete or pool.invalid:
            return None
        for per_device, devs in pool.slices:
            for d in devs:
                if d.name == key[2]:
                    return per_device, d
        return None
