"""The allocation engine over a cluster snapshot: where would each claim go, or why not.

An :class:`Engine` holds ResourceSlices (gathered into pools), DeviceClasses, Nodes and a ledger
of what existing allocations already take. :meth:`Engine.allocate` tries the nodes (rotating the
start like the scheduler does), stops after ``max_feasible_nodes`` nodes can take the claim,
keeps the one with the best topology score, and returns the ``status.allocation`` the API would
hold. When no node fits, the result carries an :class:`~kubeacc.engine.explain.Explanation`.

:meth:`Engine.allocate_pod` places a pod's pending claims together, as kube-scheduler does (one
allocator call per node for all of them, backtracking across claims); :meth:`Engine.allocate`
is the one-claim pod. An error that fails the pod in kube-scheduler (its Filter returns an error
status, e.g. a CEL runtime error on a device its search reaches on any node it tries) fails it
here too, with the reason in ``error``: the pod is placed nowhere, not on another node.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeacc.engine.celenv import CelError, compile_selector
from kubeacc.engine.celreads import selector_reads, view
from kubeacc.engine.claims import Claim, ClaimError, DeviceClass, parse_claim
from kubeacc.engine.explain import Explanation
from kubeacc.engine.extended import ExtendedResourceError, NodeExtended, PodExtended
from kubeacc.engine.firstfit import AllocationError, FirstFit
from kubeacc.engine.nodepools import NodePool, gather_node_pools, uses_compatibility_groups
from kubeacc.engine.pools import (
    Device,
    DeviceCache,
    DeviceKey,
    Node,
    Pool,
    gather_pools,
    get,
    node_names,
)
from kubeacc.engine.quantity import format_quantity
from kubeacc.engine.release import Release
from kubeacc.engine.release import release as resolve_release
from kubeacc.engine.search import NodeResult, NodeSearch, Pick, SelectorCache, StaticCache
from kubeacc.engine.signature import Signatures
from kubeacc.engine.state import Ledger
from kubeacc.engine.verdictkey import shareable_reasons, verdict_vector, without_selectors

#: remembered answers (claim content x node signature), least recently used dropped first
ANSWERS_MAX = 200_000


@dataclass
class Placement:
    claim: str
    node: str | None
    allocation: dict[str, Any] | None
    score: int = 0
    explanation: Explanation | None = None
    nodes_tried: int = 0
    seconds: float = 0.0
    #: kube-scheduler's error that fails the pod (the claim is then placed nowhere)
    error: str | None = None
    #: the pod whose claims were placed together with this one
    pod: str | None = None
    #: for the pod's extended resources (kubeacc.engine.extended): the counts per resource,
    #: those its node's device plugin serves, and which container's request is which
    extended: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.allocation is not None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"claim": self.claim, "allocated": self.ok}
        if self.pod is not None:
            out["pod"] = self.pod
        if self.extended is not None:
            out["extendedResources"] = self.extended
        if self.error is not None:
            out["error"] = self.error
        if self.ok:
            out["node"] = self.node
            out["allocation"] = self.allocation
            out["score"] = self.score
        elif self.explanation is not None:
            out["explanation"] = self.explanation.to_dict()
        return out


@dataclass
class PodPlacement:
    """A pod's claims placed together (all on ``node``) or not at all."""

    pod: str
    placements: list[Placement]
    node: str | None = None
    error: str | None = None
    explanation: Explanation | None = None
    nodes_tried: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.node is not None and all(p.ok for p in self.placements)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "allocated": self.ok}
        if self.ok:
            out["node"] = self.node
        if self.error is not None:
            out["error"] = self.error
        if self.explanation is not None and not self.ok:
            out["explanation"] = self.explanation.to_dict()
        out["claims"] = [p.to_dict() for p in self.placements]
        return out


class Engine:
    def __init__(
        self,
        slices: Iterable[Mapping[str, Any]],
        classes: Iterable[Mapping[str, Any]],
        allocated_claims: Iterable[Mapping[str, Any]] = (),
        nodes: Iterable[Mapping[str, Any]] | None = None,
        *,
        max_feasible_nodes: int = 4,
        step_limit: int = 20000,
        release: str | Release | None = None,
    ) -> None:
        #: the kube-scheduler release whose allocator the engine follows (default: the newest)
        self.release = resolve_release(release)
        slice_list = list(slices)
        self._device_cache = DeviceCache()
        all_pools = gather_pools(slice_list, self._device_cache)
        self.pools: dict[tuple[str, str], Pool] = {(p.driver, p.name): p for p in all_pools}
        self.complete = [p for p in all_pools if not p.incomplete]
        self.incomplete = [p for p in all_pools if p.incomplete]
        self.classes = {c.name: c for c in (DeviceClass.from_dict(o) for o in classes)}
        if nodes is not None:
            self.nodes = [Node.from_dict(n) for n in nodes]
        else:
            self.nodes = [Node(n, {"kubernetes.io/hostname": n}) for n in node_names(slice_list)]
        self.ledger = Ledger()
        self.cache: SelectorCache = {}
        #: FirstFit's selector verdicts per (class selectors, request selectors, fingerprint)
        self._verdicts: dict[tuple[tuple[str, ...], tuple[str, ...], str], bool] = {}
        self.static: StaticCache = {}
        self.max_feasible_nodes = max_feasible_nodes
        self.step_limit = step_limit
        self._start = 0
        self._node_devices: dict[str, list[Device]] = {}
        shared = [d for p in self.complete for d in p.devices if d.node_name is None]
        local: dict[str, list[Device]] = {}
        for p in self.complete:
            for d in p.devices:
                if d.node_name is not None:
                    local.setdefault(d.node_name, []).append(d)
        for n in self.nodes:
            self._node_devices[n.name] = local.get(n.name, []) + [
                d for d in shared if d.reachable_from(n)
            ]
        self.by_key: dict[DeviceKey, Device] = {d.key: d for p in all_pools for d in p.devices}
        for claim in allocated_claims:
            self.ledger.record(_results(claim), self.by_key)
        # The scheduler's view per node: slices named for it plus slices without a node name.
        self._slices_on: dict[str, list[Mapping[str, Any]]] = {}
        self._slices_shared: list[Mapping[str, Any]] = []
        self._slices_by_pool: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for s in slice_list:
            spec = get(s, "spec", {})
            pool_key = (str(get(spec, "driver", "")), str(get(get(spec, "pool", {}), "name", "")))
            self._slices_by_pool.setdefault(pool_key, []).append(s)
            if get(spec, "nodeName") and not get(spec, "sharedCounters"):
                self._slices_on.setdefault(str(get(spec, "nodeName")), []).append(s)
            else:
                self._slices_shared.append(s)
        self._node_pools: dict[str, list[NodePool]] = {}
        self.signatures = Signatures(groups=self.release.compatibility_groups)
        #: answers per (claim content, node signature), and allocations per (claim content
        #: without selectors, selector verdicts, node signature): kubeacc.engine.verdictkey
        self._answers: OrderedDict[tuple[Any, ...], tuple[str, list[Any]]] = OrderedDict()
        # Signatures per node, recomputed only for nodes that see a pool a commit touched.
        self._sig_of: dict[str, int] = {}
        self._stripped: dict[str, str] = {}
        self._views: dict[tuple[Any, str], Hashable] = {}
        self._nodes_of_pool: dict[tuple[str, str], list[str]] = {}
        for n in self.nodes:  # once, at load: allocations then only read these
            for pool in self.node_pools(n):
                self._nodes_of_pool.setdefault((pool.driver, pool.name), []).append(n.name)
            self._signature(n)

    def node_pools(self, node: Node) -> list[NodePool]:
        hit = self._node_pools.get(node.name)
        if hit is None:
            hit = gather_node_pools(
                node,
                self._slices_on.get(node.name, []) + self._slices_shared,
                self._slices_by_pool,
                self._device_cache,
                self.release,
            )
            self._node_pools[node.name] = hit
        return hit

    def _matches(self, expr: str, dev: Device) -> bool:
        key = (expr, self._view(expr, dev))
        v = self.cache.get(key)
        if v is None:
            try:
                v = dev.env.matches(compile_selector(expr, self.release.name))
            except CelError as e:
                v = str(e)
            self.cache[key] = v
        if isinstance(v, str):
            raise CelError(v)
        return v

    def _view(self, expr: str, dev: Device) -> Hashable:
        """What of the device the expression's verdict depends on (kubeacc.engine.celreads):
        the values it reads, or the whole fingerprint."""
        paths = selector_reads(expr)
        if paths is None:
            return dev.fingerprint
        key = (paths, dev.fingerprint)
        seen = self._views.get(key)
        if seen is None:
            seen = view(dev.env.variable, paths) or dev.fingerprint
            if len(self._views) > ANSWERS_MAX:
                self._views.clear()
            self._views[key] = seen
        return seen

    def _node_result(
        self, claim: Claim, ckey: str, n: Node, expl: Explanation
    ) -> NodeResult | None:
        """The node's allocation if kube-scheduler would find one there: feasibility comes from
        the scheduler's first-fit search; the topology-aware pick is kept when the scheduler
        could make it too, else the first fit is used.

        Answers are remembered per (claim content, node signature): a node that looks the same
        to the search as one already answered for an equal claim gets the same answer (its own
        devices at the same positions) without a search."""
        pools = self.node_pools(n)
        sig = self._signature(n)
        known = self._answers.get((ckey, sig))
        vkey = None
        if known is None:
            vkey = self._verdict_key([claim], ckey, pools, sig)
            known = self._answers.get(vkey) if vkey is not None else None
        if known is not None:
            self._answers.move_to_end((ckey, sig) if vkey is None else vkey)
            if known[0] == "error":
                return NodeResult(n.name, None, error=known[1][0])
            if known[0] == "no":
                for r in known[1]:
                    expl.add(n.name, r)
                return None
            devs = self.signatures.devices(pools)
            alts = {a.name: a for r in claim.requests for a in r.alternatives}
            return NodeResult(n.name, [Pick(alts[a], devs[i], c) for a, i, c in known[1]])
        res = self._search(claim, n, pools)
        if res.error is not None:
            self._remember((ckey, sig), ("error", [res.error]))
            return res
        if res.picks is None:
            self._remember((ckey, sig), ("no", res.reasons))
            if vkey is not None and shareable_reasons(res.reasons):
                self._remember(vkey, ("no", res.reasons))
            for r in res.reasons:
                expl.add(n.name, r)
            return None
        index = {id(d): i for i, d in enumerate(self.signatures.devices(pools))}
        answer = ("yes", [(p.alt.name, index[id(p.device)], p.consumed) for p in res.picks])
        self._remember((ckey, sig), answer)
        if vkey is not None:
            self._remember(vkey, answer)
        return res

    def _verdict_key(
        self, claims: Sequence[Claim], key: str, pools: list[NodePool], sig: int
    ) -> tuple[Any, ...] | None:
        """Where an allocation found for claims equal but for their selectors is kept (None
        when the claims have no selectors or one fails on the node's devices)."""
        if not any(a.selectors for c in claims for r in c.requests for a in r.alternatives):
            return None
        stripped = self._stripped.get(key)
        if stripped is None:
            stripped = json.dumps(without_selectors(json.loads(key)), sort_keys=True)
            if len(self._stripped) > ANSWERS_MAX:
                self._stripped.clear()
            self._stripped[key] = stripped
        devices = self.signatures.devices(pools)
        vec = verdict_vector(claims, devices, self.classes, self._verdicts, self._matches)
        return None if vec is None else ("verdicts", stripped, vec, sig)

    def _signature(self, n: Node) -> int:
        hit = self._sig_of.get(n.name)
        if hit is None:
            if self.signatures.interned > ANSWERS_MAX:  # start over rather than grow forever
                self.signatures.forget()
                self._sig_of.clear()
                self._answers.clear()
            hit = self.signatures.intern(self.signatures.of(n, self.node_pools(n), self.ledger))
            self._sig_of[n.name] = hit
        return hit

    def _commit(self, results: Sequence[Mapping[str, Any]]) -> None:
        self.ledger.record(results, self.by_key)
        for r in results:
            key = (str(get(r, "driver", "")), str(get(r, "pool", "")))
            for name in self._nodes_of_pool.get(key, ()):
                self._sig_of.pop(name, None)

    def _remember(self, key: tuple[Any, ...], answer: tuple[str, list[Any]]) -> None:
        self._answers[key] = answer
        if len(self._answers) > ANSWERS_MAX:
            self._answers.popitem(last=False)

    def _first_fit(self, claims: Sequence[Claim], n: Node, pools: list[NodePool]) -> FirstFit:
        """kube-scheduler's search for ``claims`` (a pod's) on node ``n``, in this engine's
        release."""
        return FirstFit(
            claims,
            n,
            pools,
            self.classes,
            self.ledger,
            self._matches,
            verdicts=self._verdicts,
            release=self.release,
        )

    def _search(self, claim: Claim, n: Node, pools: list[NodePool]) -> NodeResult:
        try:
            fits = self._first_fit([claim], n, pools).run()
        except AllocationError as e:
            if e.fatal:
                return NodeResult(n.name, None, error=str(e))
            return NodeResult(n.name, None, [f"kube-scheduler reports an error: {e}"])
        fit = None if fits is None else fits[0]
        search = NodeSearch(
            claim,
            n,
            self._node_devices.get(n.name, []),
            classes=self.classes,
            pools=self.pools,
            ledger=self.ledger,
            cache=self.cache,
            step_limit=self.step_limit,
            incomplete_pools=self.incomplete,
            static_cache=self.static,
            groups=self.release.compatibility_groups,
        )
        res = search.run()
        if fit is None:
            hidden = self._grouped_pools(res.picks or [])
            if hidden:
                why = [
                    f"pool {pool}: its slices list compatibilityGroups, which kube-scheduler "
                    "ignores while the alpha gate DRADeviceCompatibilityGroups is off (the "
                    "default): the pool counts as incomplete (--feature-gates "
                    "DRADeviceCompatibilityGroups=true plans as a scheduler that runs with it)"
                    for pool in hidden
                ]
            elif res.picks is not None:
                why = [
                    "an allocation exists, but kube-scheduler's first-fit search does not find "
                    "it (a scheduler deviation, e.g. in v1.36 distinctAttribute keeps one "
                    "value per request; selectors run before the per-device node check; "
                    "docs/placement.md)"
                ]
            else:
                why = res.reasons or ["no allocation in kube-scheduler's first-fit search order"]
            return NodeResult(n.name, None, why)
        picks = None
        if res.picks is not None:
            picks = self._first_fit([claim], n, pools).replay(res.picks)
        return NodeResult(n.name, picks if picks is not None else fit)

    def _grouped_pools(self, picks: Sequence[Pick]) -> list[str]:
        """Pools of ``picks`` that the release ignores for their compatibility groups (gate
        off), in pick order."""
        if not self.release.compatibility_group_slices_ignored:
            return []
        out: list[str] = []
        for p in picks:
            key = (p.device.driver, p.device.pool)
            name = f"{key[0]}/{key[1]}"
            if name not in out and any(
                uses_compatibility_groups(s) for s in self._slices_by_pool.get(key, ())
            ):
                out.append(name)
        return out

    def devices_on(self, node: str) -> list[Device]:
        return self._node_devices.get(node, [])

    def allocate(
        self,
        claim_obj: Mapping[str, Any],
        node: str | None = None,
        *,
        commit: bool = True,
    ) -> Placement:
        t0 = time.perf_counter()
        try:
            claim = parse_claim(claim_obj)
        except ClaimError as e:
            name = str(get(get(claim_obj, "metadata", {}), "name", "?"))
            return Placement(name, None, None, explanation=Explanation(name, [str(e)]))
        expl = Explanation(claim.ref)
        missing = sorted(
            {
                a.device_class
                for r in claim.requests
                for a in r.alternatives
                if a.device_class not in self.classes
            }
        )
        if missing:
            expl.general.append(f"device class {', '.join(missing)} not found")
            return Placement(claim.ref, None, None, explanation=expl)
        if not claim.requests:
            return Placement(claim.ref, node, {"devices": {"results": [], "config": []}})
        nodes = self.nodes if node is None else [n for n in self.nodes if n.name == node]
        if not nodes:
            expl.general.append(f"node {node} not known" if node else "no nodes")
            return Placement(claim.ref, None, None, explanation=expl)
        feasible: list[NodeResult] = []
        ckey = json.dumps(get(get(claim_obj, "spec", {}), "devices", {}), sort_keys=True)
        tried = 0
        count = len(nodes)
        start = self._start % count if node is None else 0
        for k in range(count):
            n = nodes[(start + k) % count]
            tried += 1
            res = self._node_result(claim, ckey, n, expl)
            if res is not None and res.error is not None:
                if node is None:
                    self._start = start + tried
                return _failed(claim.ref, n.name, res.error, expl, tried, t0)
            if res is not None:
                feasible.append(res)
                if len(feasible) >= self.max_feasible_nodes:
                    break
        if node is None:
            self._start = start + tried
        if not feasible:
            return Placement(
                claim.ref,
                None,
                None,
                explanation=expl,
                nodes_tried=tried,
                seconds=time.perf_counter() - t0,
            )
        best = max(feasible, key=lambda r: r.score())  # first of the best on ties
        allocation = self._allocation(claim, best)
        if commit:
            self._commit(allocation["devices"]["results"])
        return Placement(
            claim.ref, best.node, allocation, best.score(), None, tried, time.perf_counter() - t0
        )

    def _allocation(self, claim: Claim, res: NodeResult) -> dict[str, Any]:
        assert res.picks is not None
        results: list[dict[str, Any]] = []
        for p in res.picks:
            r: dict[str, Any] = {
                "request": p.alt.name,
                "driver": p.device.driver,
                "pool": p.device.pool,
                "device": p.device.name,
            }
            if p.alt.admin_access:
                r["adminAccess"] = True
            if p.alt.tolerations:
                r["tolerations"] = list(p.alt.tolerations)
            for field_name in ("bindingConditions", "bindingFailureConditions"):
                if get(p.device.raw, field_name):
                    r[field_name] = list(get(p.device.raw, field_name))
            if p.consumed is not None:
                r["consumedCapacity"] = {
                    p.device.written_capacity(k): format_quantity(v) for k, v in p.consumed.items()
                }
                r["shareID"] = str(uuid.uuid4())
            results.append(r)
        config: list[dict[str, Any]] = []
        used_alts: dict[str, list[str]] = {}
        for p in res.picks:
            names = used_alts.setdefault(p.alt.device_class, [])
            if p.alt.name not in names:
                names.append(p.alt.name)
        for cls_name, reqs in used_alts.items():
            for c in self.classes[cls_name].config:
                config.append({"source": "FromClass", "requests": reqs, **_opaque(c)})
        chosen = {p.alt.name for p in res.picks} | {p.alt.request for p in res.picks}
        for c in claim.config:
            reqs = list(get(c, "requests", []) or [])
            if reqs and not any(r in chosen for r in reqs):
                continue
            entry: dict[str, Any] = {"source": "FromClaim", **_opaque(c)}
            if reqs:
                entry["requests"] = reqs
            config.append(entry)
        if self.release.config_for_all_unnamed:
            # v1.37: a config that names every request (or its chosen subrequest) applies to
            # all of them and is written without ``requests``
            picked = {p.alt.request: p.alt.name for p in res.picks}
            for entry in config:
                named = entry.get("requests")
                if named and all(
                    r.name in named or picked.get(r.name) in named for r in claim.requests
                ):
                    del entry["requests"]
        out: dict[str, Any] = {"devices": {"results": results, "config": config}}
        selector = _node_selector(res.node, [p.device for p in res.picks])
        if selector is not None:
            out["nodeSelector"] = selector
        return out

    def plan(self, claims: Sequence[Mapping[str, Any]]) -> list[Placement]:
        """Allocate claims one after another, each seeing the previous ones' devices taken."""
        return [self.allocate(c) for c in claims]

    # -- pods -------------------------------------------------------------------------------
    def allocate_pod(
        self,
        claim_objs: Sequence[Mapping[str, Any]],
        node: str | None = None,
        *,
        commit: bool = True,
        pod: str = "",
        extended: PodExtended | None = None,
    ) -> PodPlacement:
        """Place a pod's pending claims together: on each node tried, one first-fit search for
        all of them in claim order, going back into earlier claims when a later one does not
        fit (kube-scheduler's allocator). A one-claim pod is :meth:`allocate`, with its
        topology-aware pick; a pod of several claims gets the scheduler's own first fit.

        ``extended``: the pod's extended resources that DeviceClasses serve. On each node their
        special claim (kubeacc.engine.extended) is searched last, together with the others; a
        node whose device plugin serves them needs none. Its placement comes last, named
        ``<pod>-extended-resources``."""
        if len(claim_objs) == 1 and extended is None:
            one = self.allocate(claim_objs[0], node, commit=commit)
            one.pod = pod or None
            return PodPlacement(
                pod,
                [one],
                one.node if one.ok else None,
                one.error,
                one.explanation,
                one.nodes_tried,
                one.seconds,
            )
        t0 = time.perf_counter()
        expl = Explanation(f"pod {pod}" if pod else "pod")
        claims: list[Claim] = []
        for obj in claim_objs:
            try:
                claims.append(parse_claim(obj))
            except ClaimError as e:
                name = str(get(get(obj, "metadata", {}), "name", "?"))
                expl.general.append(f"claim {name}: {e}")
        ext_ref = [] if extended is None else [extended.claim_ref]
        if len(claims) != len(claim_objs):
            return self._pod_failed(pod, claim_objs, claims, expl, None, 0, t0, ext_ref)
        missing = sorted(
            {
                a.device_class
                for c in claims
                for r in c.requests
                for a in r.alternatives
                if a.device_class not in self.classes
            }
        )
        if missing:
            expl.general.append(f"device class {', '.join(missing)} not found")
            return self._pod_failed(pod, claim_objs, claims, expl, None, 0, t0, ext_ref)
        nodes = self.nodes if node is None else [n for n in self.nodes if n.name == node]
        if not nodes:
            expl.general.append(f"node {node} not known" if node else "no nodes")
            return self._pod_failed(pod, claim_objs, claims, expl, None, 0, t0, ext_ref)
        pkey = json.dumps(
            [get(get(c, "spec", {}), "devices", {}) for c in claim_objs], sort_keys=True
        )
        feasible: list[tuple[str, list[list[Pick]], list[Claim], NodeExtended | None]] = []
        tried = 0
        count = len(nodes)
        start = self._start % count if node is None else 0
        error: str | None = None
        parsed: dict[int, tuple[list[Claim], str]] = {}  # per special claim (one per node kind)
        for k in range(count):
            n = nodes[(start + k) % count]
            tried += 1
            node_claims, node_key, ext = claims, pkey, None
            if extended is not None:
                ext = _node_extended(extended, n)
                if ext.reason is not None:
                    expl.add(n.name, ext.reason)
                    continue
                if ext.claim is not None:
                    hit = parsed.get(id(ext.claim))
                    if hit is None:
                        devices = ext.claim["spec"]["devices"]
                        hit = (
                            [*claims, parse_claim(ext.claim)],
                            json.dumps([pkey, devices], sort_keys=True),
                        )
                        parsed[id(ext.claim)] = hit
                    node_claims, node_key = hit
            res = self._pod_node_result(node_claims, node_key, n, expl) if node_claims else []
            if isinstance(res, str):
                error = f"node {n.name}: {res}"
                break
            if res is not None:
                feasible.append((n.name, res, node_claims, ext))
                if len(feasible) >= self.max_feasible_nodes:
                    break
        if node is None:
            self._start = start + tried
        if error is not None or not feasible:
            return self._pod_failed(pod, claim_objs, claims, expl, error, tried, t0, ext_ref)

        def score(f: tuple[str, list[list[Pick]], list[Claim], NodeExtended | None]) -> int:
            return sum(NodeResult(f[0], picks).score() for picks in f[1])

        best_node, best, best_claims, best_ext = max(feasible, key=score)  # first on ties
        placements = []
        for claim, picks in zip(best_claims, best, strict=True):
            chosen = NodeResult(best_node, picks)
            allocation = self._allocation(claim, chosen)
            placements.append(
                Placement(claim.ref, best_node, allocation, chosen.score(), pod=pod or None)
            )
        if extended is not None and best_ext is not None:
            if best_ext.claim is None:  # the device plugin serves all of them
                empty: dict[str, Any] = {"devices": {"results": [], "config": []}}
                placements.append(Placement(extended.claim_ref, best_node, empty, pod=pod or None))
            placements[-1].claim = extended.claim_ref
            placements[-1].extended = _extended_note(extended, best_ext)
        if commit:
            for p in placements:
                assert p.allocation is not None
                self._commit(p.allocation["devices"]["results"])
            if extended is not None and best_ext is not None and best_ext.plugin:
                extended.take(best_node, best_ext.plugin)
        seconds = time.perf_counter() - t0
        for p in placements:
            p.nodes_tried, p.seconds = tried, seconds
        return PodPlacement(pod, placements, best_node, None, None, tried, seconds)

    def _pod_failed(
        self,
        pod: str,
        claim_objs: Sequence[Mapping[str, Any]],
        claims: Sequence[Claim],
        expl: Explanation,
        error: str | None,
        tried: int,
        t0: float,
        extra_refs: Sequence[str] = (),
    ) -> PodPlacement:
        if error is not None:
            expl.general.insert(0, _fails_pod(error))
        seconds = time.perf_counter() - t0
        refs = (
            [c.ref for c in claims]
            if len(claims) == len(claim_objs)
            else [str(get(get(o, "metadata", {}), "name", "?")) for o in claim_objs]
        ) + list(extra_refs)
        placements = [
            Placement(
                ref,
                None,
                None,
                explanation=Explanation(ref, list(expl.general), dict(expl.per_node)),
                nodes_tried=tried,
                seconds=seconds,
                error=error,
                pod=pod or None,
            )
            for ref in refs
        ]
        return PodPlacement(pod, placements, None, error, expl, tried, seconds)

    def _pod_node_result(
        self, claims: Sequence[Claim], pkey: str, n: Node, expl: Explanation
    ) -> list[list[Pick]] | str | None:
        """The picks of every claim of the pod on this node, None (with the reasons added to
        ``expl``), or the error that fails the pod. Remembered per (pod content, node
        signature) like single claims."""
        pools = self.node_pools(n)
        sig = self._signature(n)
        known = self._answers.get((pkey, sig))
        vkey = None
        if known is None:
            vkey = self._verdict_key(claims, pkey, pools, sig)
            known = self._answers.get(vkey) if vkey is not None else None
        if known is not None:
            self._answers.move_to_end((pkey, sig) if vkey is None else vkey)
            if known[0] == "error":
                return str(known[1][0])
            if known[0] == "no":
                for r in known[1]:
                    expl.add(n.name, r)
                return None
            devs = self.signatures.devices(pools)
            out = []
            for claim, picks in zip(claims, known[1], strict=True):
                alts = {a.name: a for r in claim.requests for a in r.alternatives}
                out.append([Pick(alts[a], devs[i], c) for a, i, c in picks])
            return out
        try:
            fit = self._first_fit(claims, n, pools).run()
        except AllocationError as e:
            if e.fatal:
                self._remember((pkey, sig), ("error", [str(e)]))
                return str(e)
            fit, reasons = None, [f"kube-scheduler reports an error: {e}"]
        else:
            reasons = [
                f"the pod's {len(claims)} claims do not fit together in kube-scheduler's "
                "first-fit search (it backtracks across claims)"
            ]
            if fit is None and len(claims) == 1:  # one claim (extended resources): say why
                single = self._search(claims[0], n, pools)
                if single.picks is None and single.reasons and single.error is None:
                    reasons = single.reasons
        if fit is None:
            self._remember((pkey, sig), ("no", reasons))
            if vkey is not None and shareable_reasons(reasons):
                self._remember(vkey, ("no", reasons))
            for r in reasons:
                expl.add(n.name, r)
            return None
        index = {id(d): i for i, d in enumerate(self.signatures.devices(pools))}
        answer = ("yes", [[(p.alt.name, index[id(p.device)], p.consumed) for p in c] for c in fit])
        self._remember((pkey, sig), answer)
        if vkey is not None:
            self._remember(vkey, answer)
        return fit

    def plan_pods(
        self, pods: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]
    ) -> list[PodPlacement]:
        """Allocate pods one after another (each pod's claims together), each seeing the
        previous pods' devices taken."""
        return [self.allocate_pod(claims, pod=name) for name, claims in pods]


def _node_extended(extended: PodExtended, n: Node) -> NodeExtended:
    try:
        return extended.for_node(n)
    except ExtendedResourceError as e:
        return NodeExtended(reason=str(e))


def _extended_note(extended: PodExtended, ext: NodeExtended) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": dict(extended.requests)}
    if ext.plugin:
        out["devicePlugin"] = dict(ext.plugin)
    if ext.mappings:
        out["requestMappings"] = list(ext.mappings)
    return out


def _fails_pod(error: str) -> str:
    return (
        f"kube-scheduler fails the pod with an error: {error} (its Filter returns an error "
        "status: the pod is retried with backoff, not placed on another node)"
    )


def _failed(ref: str, node: str, error: str, expl: Explanation, tried: int, t0: float) -> Placement:
    err = f"node {node}: {error}"
    expl.general.insert(0, _fails_pod(err))
    return Placement(
        ref,
        None,
        None,
        explanation=expl,
        nodes_tried=tried,
        seconds=time.perf_counter() - t0,
        error=err,
    )


def _opaque(c: Mapping[str, Any]) -> dict[str, Any]:
    op = get(c, "opaque")
    return {"opaque": dict(op)} if op else {}


def _node_selector(node: str, devices: Sequence[Device]) -> dict[str, Any] | None:
    if any(d.node_name is not None for d in devices):
        return {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        }
    for d in devices:
        if d.node_selector:
            return dict(d.node_selector)
    return None


def _results(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    alloc = get(get(claim, "status", {}), "allocation", {})
    return list(get(get(alloc, "devices", {}), "results", []) or [])
