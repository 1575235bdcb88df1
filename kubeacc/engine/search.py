"""Allocate one claim on one node: filter candidates, then backtrack over the requests.

Order of work for each request alternative: devices reachable from the node (complete pools
only), the class's selectors, the request's selectors, taints, availability (not in use unless
admin access), capacity. Requests are then satisfied in order; a ``firstAvailable`` request tries
its subrequests in order; an ``ExactCount`` request picks ``count`` devices as combinations in
candidate order (candidates ordered topology-first: densest matching PCIe root / NUMA group
that fits); ``All`` takes every matching device and fails if any is unavailable or none exists.
Every pick is checked against the claim's constraints (matchAttribute / distinctAttribute),
the pool's shared counters and consumable capacity, and undone on backtrack. The number of picks
is capped; hitting the cap is reported, never hangs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.engine.celenv import CelError, Selector, compile_selector
from kubeacc.engine.claims import ALL, Alternative, Claim, Constraint, DeviceClass
from kubeacc.engine.compatgroups import EMPTY, Intersection, baseline, device_groups
from kubeacc.engine.explain import Funnel
from kubeacc.engine.pools import AttrValue, Device, DeviceKey, Node, Pool
from kubeacc.engine.quantity import format_quantity, parse_quantity
from kubeacc.engine.state import CounterKey, Ledger

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: The standard attribute first (any driver's device), then kube-acc's own (older agents).
NUMA_ATTRS = ("resource.kubernetes.io/numaNode", "kubeacc.io/numaNode")

#: selector verdict cache: (expression, device fingerprint, or the values of the device the
#: expression reads: kubeacc.engine.celreads) -> True/False or the error text
SelectorCache = dict[tuple[str, Hashable], bool | str]

#: per node and (class, selectors): devices passing them and the funnel so far
#: an attribute as a constraint compares it: (kind, value as written)
TypedValue = tuple[str, Any]
StaticCache = dict[tuple[str, str, tuple[str, ...]], tuple[list[Device], list[tuple[str, int]]]]


class SearchLimit(Exception):
    pass


class CelAbort(Exception):
    pass


@dataclass
class Pick:
    alt: Alternative
    device: Device
    consumed: dict[str, Fraction] | None = None


class AllModeConflict(Exception):
    """An ``All`` request can't take every device: the claim fails on this node."""


@dataclass
class NodeResult:
    node: str
    picks: list[Pick] | None
    reasons: list[str] = field(default_factory=list)
    steps: int = 0
    #: an error that fails the whole pod in kube-scheduler (not only this node)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.picks is not None

    def score(self) -> int:
        """Topology quality: pairs sharing a PCIe root count 2, sharing a NUMA node 1."""
        if not self.picks:
            return 0
        devs = [p.device for p in self.picks]
        s = 0
        for i, a in enumerate(devs):
            for b in devs[i + 1 :]:
                ra, rb = a.attribute(PCIE_ROOT), b.attribute(PCIE_ROOT)
                if ra is not None and ra == rb:
                    s += 2
                na, nb = _numa(a), _numa(b)
                if na is not None and na == nb:
                    s += 1
        return s


def _numa(d: Device) -> AttrValue | dict[str, str] | None:
    for a in NUMA_ATTRS:
        v = d.attribute(a)
        if v is not None:
            return v
    return None


def tolerated(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> bool:
    for t in taints:
        effect = t.get("effect", "")
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        ok = False
        for tol in tolerations:
            if tol.get("effect") and tol.get("effect") != effect:
                continue
            op = tol.get("operator", "Equal")
            any_key = tol.get("key") in (None, "") and op == "Exists"
            same = tol.get("key") == t.get("key") and (
                op == "Exists" or tol.get("value", "") == t.get("value", "")
            )
            ok = any_key or same
            if ok:
                break
        if not ok:
            return False
    return True


def _capacity_of(dev: Device, name: str) -> tuple[str, Fraction] | None:
    q = dev.capacity_key(name)
    return None if q is None else (q, dev.capacity[q])


def _round_to_policy(requested: Fraction, policy: Mapping[str, Any] | None) -> Fraction | None:
    """Apply a capacity requestPolicy (validValues / validRange with step); None: not allowed."""
    if not policy:
        return requested
    values = policy.get("validValues")
    if values:
        opts = sorted(parse_quantity(str(v)) for v in values)
        for v in opts:
            if v >= requested:
                return v
        return None
    rng = policy.get("validRange")
    if rng:
        lo = parse_quantity(str(rng.get("min", "0")))
        hi = parse_quantity(str(rng["max"])) if rng.get("max") is not None else None
        step = parse_quantity(str(rng["step"])) if rng.get("step") is not None else None
        v = max(requested, lo)
        if step:
            k = -(-(v - lo) // step)
            v = lo + k * step
        if hi is not None and v > hi:
            return None
        return v
    return requested


def consumption(alt: Alternative, dev: Device) -> dict[str, Fraction] | None:
    """What one allocation of a shareable device consumes, or None if it cannot fit the
    request policy. Unrequested capacities consume their policy default (else all of it)."""
    requested = {}
    for name, q in alt.capacity:
        found = _capacity_of(dev, name)
        if found is None:
            return None
        requested[found[0]] = q
    out: dict[str, Fraction] = {}
    for cap, total in dev.capacity.items():
        policy = dev.capacity_policy.get(cap)
        if cap in requested:
            v = _round_to_policy(requested[cap], policy)
            if v is None:
                return None
        elif policy and policy.get("default") is not None:
            v = parse_quantity(str(policy["default"]))
        else:
            v = total
        out[cap] = v
    return out


class NodeSearch:
    """Allocate one claim on one node against a ledger (which it does not modify)."""

    def __init__(
        self,
        claim: Claim,
        node: Node,
        devices: Sequence[Device],
        *,
        classes: Mapping[str, DeviceClass],
        pools: Mapping[tuple[str, str], Pool],
        ledger: Ledger,
        cache: SelectorCache,
        step_limit: int = 20000,
        incomplete_pools: Sequence[Pool] = (),
        static_cache: StaticCache | None = None,
        groups: bool = False,
    ) -> None:
        self.static = static_cache if static_cache is not None else {}
        #: compatibility groups are enforced (DRADeviceCompatibilityGroups): picks on one
        #: counter set must keep their groups intersecting (kubeacc.engine.compatgroups)
        self.groups = groups
        self.group_state: dict[tuple[str, str, str], Intersection] = {}
        self.claim = claim
        self.node = node
        self.devices = devices
        self.classes = classes
        self.pools = pools
        self.ledger = ledger
        self.cache = cache
        self.step_limit = step_limit
        self.incomplete = [
            p for p in incomplete_pools if any(d.reachable_from(node) for d in p.devices)
        ]
        self.steps = 0
        self.failures: Counter[str] = Counter()
        self.funnels: dict[str, Funnel] = {}
        self.cands: dict[str, list[Device]] = {}
        self.all_blocked: dict[str, str] = {}

    # -- filtering -------------------------------------------------------------------
    def _match(self, sel: Selector | str, dev: Device) -> bool:
        if isinstance(sel, str):  # kube-scheduler compiles when a device first reaches it
            raise CelAbort(f"device {dev.id}: CEL compile error: {sel}")
        key = (sel.expression, dev.fingerprint)
        v = self.cache.get(key)
        if v is None:
            try:
                v = dev.env.matches(sel)
            except CelError as e:
                v = str(e)
            self.cache[key] = v
        if isinstance(v, str):
            raise CelAbort(f"device {dev.id}: CEL runtime error: {v}")
        return v

    def candidates(self, alt: Alternative) -> list[Device]:
        if alt.name in self.cands:
            return self.cands[alt.name]
        f = Funnel(alt.name)
        skey = (self.node.name, alt.device_class, alt.selectors)
        hit = self.static.get(skey)
        if hit is None:
            stages: list[tuple[str, int]] = []
            cls = self.classes[alt.device_class]
            devs = list(self.devices)
            stages.append(("devices on node", len(devs)))
            class_sels = [_compiled(e) for e in cls.selectors]
            devs = [d for d in devs if all(self._match(s, d) for s in class_sels)]
            stages.append((f"in class {cls.name}", len(devs)))
            for expr in alt.selectors:
                sel = _compiled(expr)
                devs = [d for d in devs if self._match(sel, d)]
                stages.append((f"pass selector '{_short(expr)}'", len(devs)))
            hit = (devs, stages)
            self.static[skey] = hit
        devs, stages = hit
        f.stages.extend(stages)
        matching = devs
        if any(d.taints for d in devs):
            devs = [d for d in devs if tolerated(d.taints, alt.tolerations)]
            f.add("untainted or tolerated", len(devs))
        if alt.mode == ALL:
            busy = [d for d in devs if not self._free(alt, d)]
            if self.incomplete:
                self.all_blocked[alt.name] = (
                    f"request {alt.name}: asks for all devices, but pool "
                    f"{self.incomplete[0].id} is incomplete"
                )
            elif not matching:
                self.all_blocked[alt.name] = f"{f}, need at least 1 for allocationMode All"
            elif len(devs) < len(matching) or busy:
                self.all_blocked[alt.name] = (
                    f"request {alt.name}: allocationMode All but "
                    f"{len(busy) + len(matching) - len(devs)} of {len(matching)} matching "
                    f"devices are allocated or tainted"
                )
            self.funnels[alt.name] = f
            self.cands[alt.name] = devs
            return devs
        devs = [d for d in devs if self._free(alt, d)]
        f.add("free" if not alt.admin_access else "usable with admin access", len(devs))
        for name, q in alt.capacity:
            devs = [d for d in devs if self._capacity_ok(alt, d, name, q)]
            f.add(f"with {name} >= {format_quantity(q)}", len(devs))
        if alt.capacity:  # what a share consumes of the capacities it did not name
            fit = [d for d in devs if self._consumption_fits(alt, d)]
            if len(fit) < len(devs):
                f.add("with room for the default capacities", len(fit))
            devs = fit
        f.need = str(alt.count)
        self.funnels[alt.name] = f
        devs = self._topology_order(devs, alt.count)
        self.cands[alt.name] = devs
        return devs

    def _free(self, alt: Alternative, d: Device) -> bool:
        if alt.admin_access:
            return True
        return d.key not in self.ledger.in_use

    def _capacity_ok(self, alt: Alternative, d: Device, name: str, q: Fraction) -> bool:
        found = _capacity_of(d, name)
        if found is None:
            return False
        if not d.allow_multiple:
            return found[1] >= q
        cons = consumption(alt, d)
        if cons is None:
            return False
        # Only the named capacity, so that each funnel step names the capacity that ran out;
        # _consumption_fits then checks all of them.
        c = found[0]
        used = self.ledger.capacity_of(d)
        return d.capacity[c] - used.get(c, Fraction(0)) >= cons[c]

    def _consumption_fits(self, alt: Alternative, d: Device) -> bool:
        if not d.allow_multiple:
            return True
        cons = consumption(alt, d)
        if cons is None:
            return False
        used = self.ledger.capacity_of(d)
        return all(d.capacity[c] - used.get(c, Fraction(0)) >= v for c, v in cons.items())

    def _topology_order(self, devs: list[Device], count: int) -> list[Device]:
        """Devices of the group (NUMA node, PCIe root) that fits ``count`` most tightly first."""
        groups: dict[tuple[str, str], list[Device]] = {}
        for d in devs:
            groups.setdefault((str(_numa(d)), str(d.attribute(PCIE_ROOT))), []).append(d)
        if len(groups) <= 1:
            return devs
        numa_size = Counter(k[0] for k in groups for _ in groups[k])

        def key(item: tuple[tuple[str, str], list[Device]]) -> tuple[int, int, int, str]:
            (numa, root), members = item
            fits = len(members) >= count
            numa_fits = numa_size[numa] >= count
            return (
                0 if fits else 1 if numa_fits else 2,
                len(members) if fits else -numa_size[numa] if numa_fits else -len(members),
                -numa_size[numa] if not fits else 0,
                f"{numa}/{root}",
            )

        out: list[Device] = []
        for _, members in sorted(groups.items(), key=key):
            out.extend(members)
        return out

    # -- search ----------------------------------------------------------------------
    def run(self) -> NodeResult:
        try:
            static = self._static_check()
            if static:
                return NodeResult(self.node.name, None, static, self.steps)
            self.picks: list[Pick] = []
            self.used: set[DeviceKey] = set()
            self.values: dict[int, TypedValue] = {}
            self.distinct: dict[int, list[TypedValue]] = {}
            self.counters: dict[CounterKey, dict[str, Fraction]] = {}
            self.capacity: dict[DeviceKey, dict[str, Fraction]] = {}
            self.shares: Counter[DeviceKey] = Counter()
            if self._solve(0):
                return NodeResult(self.node.name, list(self.picks), [], self.steps)
        except (CelAbort, AllModeConflict) as e:
            return NodeResult(self.node.name, None, [str(e)], self.steps)
        except SearchLimit:
            return NodeResult(
                self.node.name,
                None,
                [
                    f"search stopped after {self.step_limit} steps without a solution",
                    *self._failure_summary(),
                ],
                self.steps,
            )
        return NodeResult(self.node.name, None, self._failure_summary(), self.steps)

    def _failure_summary(self) -> list[str]:
        if not self.failures:
            return ["no combination of candidates satisfies all requests together"]
        return [f"{why} ({n} tries)" for why, n in self.failures.most_common(2)]

    def _static_check(self) -> list[str]:
        reasons: list[str] = []
        for req in self.claim.requests:
            fits = []
            texts = []
            for alt in req.alternatives:
                c = self.candidates(alt)
                if alt.name in self.all_blocked:
                    texts.append(self.all_blocked[alt.name])
                elif len(c) >= alt.count:
                    fits.append(alt)
                else:
                    texts.append(str(self.funnels[alt.name]))
            if not fits:
                if req.first_available:
                    reasons.append(f"request {req.name}: no subrequest fits: " + "; ".join(texts))
                else:
                    reasons.extend(texts)
        if reasons:
            return reasons
        for con in self.claim.constraints:
            if con.match_attribute:
                why = self._common_value_check(con)
                if why:
                    reasons.append(why)
        return reasons

    def _common_value_check(self, con: Constraint) -> str | None:
        """Necessary condition: some value is shared by enough candidates of every request."""
        attr = con.attribute
        involved = [
            r
            for r in self.claim.requests
            if not con.requests
            or r.name in con.requests
            or any(a.name in con.requests for a in r.alternatives)
        ]
        common: set[str] | None = None
        seen: Counter[str] = Counter()
        for req in involved:
            ok_values: set[str] = set()
            for alt in req.alternatives:
                if not con.applies(alt):
                    continue
                vals = Counter(
                    _shown(d.typed_attribute(attr))
                    for d in self.candidates(alt)
                    if d.typed_attribute(attr) is not None
                )
                seen.update(vals)
                need = alt.count if alt.mode != ALL else len(self.candidates(alt))
                ok_values |= {v for v, n in vals.items() if n >= need}
            common = ok_values if common is None else common & ok_values
        if common:
            return None
        if not seen:
            return f"{con.label()}: no candidate device has the attribute"
        shown = ", ".join(f"{v.strip(chr(39))} x{n}" for v, n in seen.most_common(4))
        return f"{con.label()}: no common value among candidates ({shown})"

    def _solve(self, ri: int) -> bool:
        if ri == len(self.claim.requests):
            return True
        req = self.claim.requests[ri]
        for alt in req.alternatives:
            if alt.name in self.all_blocked:
                continue
            cands = self.candidates(alt)
            if alt.mode == ALL:
                if self._take_all(alt, cands, ri):
                    return True
                continue
            if len(cands) >= alt.count and self._pick(alt, cands, 0, alt.count, ri):
                return True
        return False

    def _take_all(self, alt: Alternative, cands: list[Device], ri: int) -> bool:
        """All or nothing. As in kube-scheduler, a device of an ``All`` request that can't be
        added (a constraint rejects it) fails the claim outright: it does not fall through to
        a later firstAvailable subrequest."""
        added = 0
        for d in cands:
            if not self._add(alt, d):
                raise AllModeConflict(
                    f"request {alt.name}: cannot add device {d.name} because a claim "
                    "constraint would not be satisfied (allocationMode All)"
                )
            added += 1
        if self._solve(ri + 1):
            return True
        for _ in range(added):
            self._undo()
        return False

    def _pick(self, alt: Alternative, cands: list[Device], start: int, need: int, ri: int) -> bool:
        if need == 0:
            return self._solve(ri + 1)
        fixed = self._fixed_values(alt)
        for i in range(start, len(cands) - need + 1):
            if (
                fixed
                and sum(1 for d in cands[i:] if all(d.typed_attribute(a) == v for a, v in fixed))
                < need
            ):
                self.failures[
                    f"{fixed[0][0]}: not enough devices with value "
                    f"{fixed[0][1][1]!r} for request {alt.name}"
                ] += 1
                return False
            d = cands[i]
            if self._add(alt, d):
                if self._pick(alt, cands, i + 1, need - 1, ri):
                    return True
                self._undo()
        return False

    def _fixed_values(self, alt: Alternative) -> list[tuple[str, TypedValue]]:
        out = []
        for ci, con in enumerate(self.claim.constraints):
            if con.match_attribute and con.applies(alt) and ci in self.values:
                out.append((con.match_attribute, self.values[ci]))
        return out

    def _add(self, alt: Alternative, d: Device) -> bool:
        self.steps += 1
        if self.steps > self.step_limit:
            raise SearchLimit
        fail = self.failures
        if d.key in self.used and not d.allow_multiple:
            fail["a device cannot serve two requests of one claim"] += 1
            return False
        undo: list[Callable[[], None]] = []
        for ci, con in enumerate(self.claim.constraints):
            if not con.applies(alt):
                continue
            # typed and as written, as the scheduler compares them (``1.2.3+build.5`` is not
            # ``1.2.3``, ``true`` is not ``1``): the first-fit search's values
            av = d.typed_attribute(con.attribute)
            if av is None:
                fail[f"{con.label()}: device {d.name} lacks the attribute"] += 1
                return self._rollback(undo)
            if con.match_attribute:
                if ci in self.values:
                    if self.values[ci] != av:
                        fail[f"{con.label()}: values differ"] += 1
                        return self._rollback(undo)
                else:
                    self.values[ci] = av

                    def _unset(ci: int = ci) -> None:
                        self.values.pop(ci)

                    undo.append(_unset)
            else:
                lst = self.distinct.setdefault(ci, [])
                if av in lst:
                    fail[f"{con.label()}: value {av[1]!r} already used"] += 1
                    return self._rollback(undo)
                lst.append(av)

                def _unappend(lst: list[TypedValue] = lst) -> None:
                    lst.pop()

                undo.append(_unappend)
        # As kube-scheduler: counters count for admin access too, and a shared device whose
        # capacity is already in use has its counters taken already.
        shared_in_use = d.allow_multiple and (
            d.key in self.ledger.capacity_used or self.shares[d.key] > 0
        )
        if not shared_in_use and self.groups and d.consumes and not self._join_groups(d, undo):
            fail[f"device {d.name}: compatibility groups disjoint from the counter set's"] += 1
            return self._rollback(undo)
        if not shared_in_use:
            for cs, counters in d.consumes:
                ck = (d.driver, d.pool, cs)
                free = self.ledger.counter_free(self.pools, ck)
                if free is None:
                    fail[f"counter set {cs} of pool {d.pool} not found"] += 1
                    return self._rollback(undo)
                pending = self.counters.setdefault(ck, {})
                for n, v in counters.items():
                    if free.get(n, Fraction(0)) - pending.get(n, Fraction(0)) < v:
                        fail[f"shared counter {cs}/{n} exhausted"] += 1
                        return self._rollback(undo)
                for n, v in counters.items():
                    pending[n] = pending.get(n, Fraction(0)) + v

                def _uncount(
                    p: dict[str, Fraction] = pending, c: dict[str, Fraction] = counters
                ) -> None:
                    for n2, v2 in c.items():
                        p[n2] -= v2

                undo.append(_uncount)
        consumed = None
        if d.allow_multiple:
            consumed = consumption(alt, d)
            if consumed is None:
                fail[f"device {d.name}: capacity request outside its request policy"] += 1
                return self._rollback(undo)
            used = self.ledger.capacity_of(d)
            pend = self.capacity.setdefault(d.key, {})
            for c, v in consumed.items():
                if d.capacity[c] - used.get(c, Fraction(0)) - pend.get(c, Fraction(0)) < v:
                    fail[f"device {d.name}: capacity {c} exhausted"] += 1
                    return self._rollback(undo)
            for c, v in consumed.items():
                pend[c] = pend.get(c, Fraction(0)) + v
            self.shares[d.key] += 1

            def _uncap(
                p: dict[str, Fraction] = pend,
                c: dict[str, Fraction] = consumed,
                k: DeviceKey = d.key,
            ) -> None:
                for n2, v2 in c.items():
                    p[n2] -= v2
                self.shares[k] -= 1

            undo.append(_uncap)
        newly_used = d.key not in self.used
        self.used.add(d.key)
        if newly_used:

            def _unuse(k: DeviceKey = d.key) -> None:
                self.used.discard(k)

            undo.append(_unuse)
        self.picks.append(Pick(alt, d, consumed))
        self._undo_stack.append(undo)
        return True

    @property
    def _undo_stack(self) -> list[list[Callable[[], None]]]:
        if not hasattr(self, "_undos"):
            self._undos: list[list[Callable[[], None]]] = []
        return self._undos

    def _join_groups(self, d: Device, undo: list[Callable[[], None]]) -> bool:
        """Fold the device's groups into each counter set it consumes (undone with ``undo``);
        False when a set's devices so far share none of them."""
        for cs, groups in device_groups(d):
            key = (d.driver, d.pool, cs)
            prev = self.group_state.get(key)
            cur = prev if prev is not None else self._group_baseline(d.driver, d.pool, cs)
            if not cur.admits(groups):
                return False
            self.group_state[key] = cur.add(groups)

            def _restore(k: tuple[str, str, str] = key, p: Intersection | None = prev) -> None:
                if p is None:
                    self.group_state.pop(k, None)
                else:
                    self.group_state[k] = p

            undo.append(_restore)
        return True

    def _group_baseline(self, driver: str, pool: str, cs: str) -> Intersection:
        found = self.pools.get((driver, pool))
        if found is None:
            return EMPTY
        held = baseline(
            found.devices, lambda k: k in self.ledger.in_use or k in self.ledger.capacity_used
        )
        return held.get(cs, EMPTY)

    def _rollback(self, undo: list[Callable[[], None]]) -> bool:
        for fn in reversed(undo):
            fn()
        return False

    def _undo(self) -> None:
        self.picks.pop()
        self._rollback(self._undo_stack.pop())


def _compiled(expr: str) -> Selector | str:
    """The compiled selector, or its compile error (raised once a device reaches it)."""
    try:
        return compile_selector(expr)
    except CelError as e:
        return str(e)


def _short(expr: str, width: int = 50) -> str:
    e = " ".join(expr.split())
    return e if len(e) <= width else e[: width - 3] + "..."


def _shown(v: TypedValue | None) -> str:
    """A constraint value for an explanation (the kind is part of it: ``true`` is not ``1``)."""
    assert v is not None
    return repr(v[1]) if v[0] == "string" else str(v[1])
