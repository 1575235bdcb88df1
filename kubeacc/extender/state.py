"""The extender's view of the cluster: GPUs per node and who holds what.

Inventory comes from the Accelerators the node agents publish (``status.device``); holdings
are the decisions recorded on pods (condition ``kubeacc.io/Decided``, else the annotation
``kubeacc.io/devices``: :mod:`.trusted`) of pods bound to the node and not finished, plus the
reservations of binds in flight. A pod keeps the decision counted for it while it is bound and
not finished, whatever later happens to its annotation. Nothing else is kept, so a restarted
extender rebuilds the same state from the API server.

Each node keeps a small summary (largest free memory of one GPU, free whole GPUs, ...) that is
refreshed when its holdings change, so Filter and Prioritize answer most pods with one lookup
per node instead of walking its GPUs.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeacc.contracts.names import model_slug
from kubeacc.contracts.trusted import trusted_decision
from kubeacc.contracts.wants import MAX_CORES, Decision
from kubeacc.model import Device, DeviceType, Inventory
from kubeacc.topology.graph import TopologyGraph
from kubeacc.units.table import UnitTable, active_table

log = logging.getLogger(__name__)
MIB = 1 << 20
#: Seconds a reservation outlives its bind call without a pod event (see State.pending).
PENDING_GRACE = 30.0
TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Gpu:
    bdf: str
    name: str
    model: str
    memory: int  # MiB
    numa: int
    available: bool  # healthy and not cordoned
    device: Device | None = None
    #: Normalized units of this GPU (the unit table; 0: no entry).
    units: int = 0


@dataclass
class GpuUse:
    memory: int = 0
    cores: int = 0
    shares: int = 0
    whole: bool = False

    @property
    def untouched(self) -> bool:
        return not self.whole and self.shares == 0


@dataclass
class NodeView:
    name: str
    gpus: dict[str, Gpu] = field(default_factory=dict)
    use: dict[str, GpuUse] = field(default_factory=dict)
    #: Bumped on every change of inventory or holdings (prioritize reuses filter's work).
    version: int = 0
    max_free: int = 0
    #: Free MiB of every GPU that takes shares, ascending.
    free_sorted: tuple[int, ...] = ()
    #: (free MiB, free cores, model) of the same GPUs, in the same order.
    slots: tuple[tuple[int, int, str], ...] = ()
    free_whole: int = 0
    whole_one_numa: int = 0
    #: Untouched GPUs per model.
    whole_by_model: dict[str, int] = field(default_factory=dict)
    #: Most untouched GPUs of one model on one NUMA node, per model.
    whole_numa_by_model: dict[str, int] = field(default_factory=dict)
    #: Units of one GPU, per model (the unit table).
    units_by_model: dict[str, int] = field(default_factory=dict)
    models: frozenset[str] = frozenset()
    biggest: int = 1
    #: Answers for the wants seen since the last change (pods of one Deployment ask alike).
    memo: dict[object, tuple[int, str]] = field(default_factory=dict)
    #: The node's signatures (:data:`SIGNATURES`, in that order), set by :meth:`refresh`:
    #: everything the summary matchers of one kind read, so nodes of one signature answer
    #: alike (``State.groups``).
    keys: tuple[object, ...] = ()
    _graph: TopologyGraph | None = None

    def refresh(self) -> None:
        self.version += 1
        self.memo = {}
        slots: list[tuple[int, int, str]] = []
        whole = 0
        per_numa: dict[int, int] = {}
        by_model: dict[str, int] = {}
        numa_model: dict[tuple[str, int], int] = {}
        units: dict[str, int] = {}
        for bdf, g in self.gpus.items():
            if not g.available:
                continue
            u = self.use.get(bdf) or GpuUse()
            if u.whole:
                continue
            slots.append((g.memory - u.memory, MAX_CORES - u.cores, g.model))
            if u.untouched:
                whole += 1
                per_numa[g.numa] = per_numa.get(g.numa, 0) + 1
                by_model[g.model] = by_model.get(g.model, 0) + 1
                numa_model[g.model, g.numa] = numa_model.get((g.model, g.numa), 0) + 1
                units[g.model] = max(units.get(g.model, 0), g.units)
        by_numa: dict[str, int] = {}
        for (model, _), n in numa_model.items():
            by_numa[model] = max(by_numa.get(model, 0), n)
        self.whole_numa_by_model = by_numa
        self.units_by_model = units
        slots.sort()
        self.slots = tuple(slots)
        self.free_sorted = tuple(s[0] for s in slots)
        self.max_free = slots[-1][0] if slots else -1
        self.free_whole = whole
        self.whole_by_model = by_model
        self.whole_one_numa = max(per_numa.values(), default=0)
        self.models = frozenset(g.model for g in self.gpus.values() if g.available)
        self.biggest = max((g.memory for g in self.gpus.values()), default=0) or 1
        has = bool(self.gpus)
        # which GPU of a node takes a share depends on the free amounts there are, not on
        # how many GPUs have each: the distinct ones only (89 signatures instead of 1,142 at
        # 5,000 nodes in bench/extender.py)
        self.keys = (
            (has, tuple(sorted(set(self.free_sorted))), self.max_free, self.biggest),
            (has, tuple(sorted(set(slots))), self.max_free, self.biggest, self.models),
            (
                has,
                self.free_whole,
                self.whole_one_numa,
                tuple(sorted(self.whole_by_model.items())),
                tuple(sorted(self.whole_numa_by_model.items())),
                tuple(sorted(self.units_by_model.items())),
            ),
        )

    def free_memory(self, bdf: str) -> int:
        return self.gpus[bdf].memory - self.use[bdf].memory if bdf in self.use else 0

    def graph(self) -> TopologyGraph:
        if self._graph is None:
            devices = [g.device for g in self.gpus.values() if g.device is not None]
            self._graph = TopologyGraph.from_inventory(Inventory(devices=devices))
        return self._graph


#: The signatures of a node, by what reads them (kubeacc/extender/placement.py, ``grouping``):
#: "memory": a share of memory only (free MiB per GPU); "share": a share with cores or a model
#: wish (free MiB, cores and model per GPU, the node's models); "whole": whole GPUs or units
#: (untouched GPUs per model and NUMA node, units per model).
SIGNATURES = ("memory", "share", "whole")


def gpu_of(device: Device, cordoned: bool = False, table: UnitTable | None = None) -> Gpu | None:
    if device.type is not DeviceType.GPU or device.pci is None:
        return None
    return Gpu(
        bdf=device.pci.bus_id,
        name=device.name,
        model=model_slug(device),
        memory=(device.memory_bytes or 0) // MIB,
        numa=device.numa_node,
        available=device.health.healthy and not cordoned,
        device=device,
        units=(table or active_table()).units_for(device.model),
    )


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class State:
    """Thread-safe: every method takes the lock; callers may also hold :attr:`lock` to make
    a read-decide-reserve sequence atomic."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeView] = {}
        self.allocs: dict[str, Decision] = {}
        #: Reservations of binds (uid -> when the bind call ended; None while it runs): kept
        #: until a pod event shows the pod bound or gone. One whose pod event never came
        #: (a watch that broke while the pod went away) is dropped :data:`PENDING_GRACE` s
        #: after its bind ended.
        self.pending: dict[str, float | None] = {}
        self._by_node: dict[str, set[str]] = {}
        #: Names of the nodes changed (inventory or holdings), in order; with
        #: :attr:`changes_base` (how many older entries were dropped) a reader that saw
        #: ``epoch`` entries knows which nodes changed since (see :mod:`.answers`).
        self.changes: list[str] = []
        self.changes_base = 0
        #: Per signature (:data:`SIGNATURES`): each signature present -> its nodes (the names
        #: as keys, in the order they got it), kept exactly as the views' ``keys`` are.
        self.groups: dict[str, dict[object, dict[str, None]]] = {k: {} for k in SIGNATURES}

    @property
    def epoch(self) -> int:
        """How many node changes happened so far (grows with every change)."""
        return self.changes_base + len(self.changes)

    def changed_since(self, epoch: int) -> list[str] | None:
        """The nodes changed since ``epoch`` (repeats possible); None: too old to tell."""
        start = epoch - self.changes_base
        if start < 0:
            return None
        return self.changes[start:]

    def _changed(self, node: str) -> None:
        changes = self.changes
        changes.append(node)
        if len(changes) > 4 * len(self.nodes) + 1024:  # readers that far behind start over
            self.changes_base += len(changes)
            self.changes = []

    # -- inventory --------------------------------------------------------------------------
    def set_node(self, node: str, gpus: Iterable[Gpu]) -> None:
        with self.lock:
            view = NodeView(node, {g.bdf: g for g in sorted(gpus, key=lambda g: g.bdf)})
            old = self.nodes.get(node)
            if old is not None and old.gpus == view.gpus:
                return
            if old is not None:
                view.version = old.version
                self._ungroup(old)
            self.nodes[node] = view
            self._recount(node)

    def remove_node(self, node: str) -> None:
        with self.lock:
            old = self.nodes.pop(node, None)
            if old is not None:
                self._ungroup(old)
                self._changed(node)

    def set_inventory(self, per_node: Mapping[str, list[Gpu]]) -> None:
        with self.lock:
            for node in list(self.nodes):
                if node not in per_node:
                    self.remove_node(node)
            for node, gpus in per_node.items():
                self.set_node(node, gpus)

    # -- holdings ---------------------------------------------------------------------------
    def _recount(self, node: str) -> None:
        view = self.nodes.get(node)
        if view is None:
            return
        use = {bdf: GpuUse() for bdf in view.gpus}
        for uid in self._by_node.get(node, ()):
            for a in self.allocs[uid].containers:
                for bdf in a.devices:
                    u = use.get(bdf)
                    if u is None:
                        continue
                    if a.whole:
                        u.whole = True
                    else:
                        u.memory += a.memory
                        u.cores += a.cores
                        u.shares += 1
        view.use = use
        self._ungroup(view)
        view.refresh()
        for groups, key in zip(self.groups.values(), view.keys, strict=True):
            groups.setdefault(key, {})[node] = None
        self._changed(node)

    def _ungroup(self, view: NodeView) -> None:
        """Take ``view``'s node out of the groups of its signatures."""
        for groups, key in zip(self.groups.values(), view.keys, strict=False):
            members = groups.get(key)
            if members is not None:
                members.pop(view.name, None)
                if not members:
                    del groups[key]

    def _set(self, uid: str, decision: Decision | None) -> None:
        old = self.allocs.get(uid)
        if old == decision:
            return
        touched = set()
        if old is not None:
            del self.allocs[uid]
            self._by_node.get(old.node, set()).discard(uid)
            touched.add(old.node)
        if decision is not None:
            self.allocs[uid] = decision
            self._by_node.setdefault(decision.node, set()).add(uid)
            touched.add(decision.node)
        for node in touched:
            self._recount(node)

    def reserve(self, uid: str, decision: Decision) -> None:
        with self.lock:
            self.pending[uid] = None
            self._set(uid, decision)

    def bound(self, uid: str, now: float | None = None) -> None:
        """The bind call for ``uid`` returned: the reservation waits for the pod event."""
        with self.lock:
            if uid in self.pending:
                self.pending[uid] = time.monotonic() if now is None else now

    def release(self, uid: str) -> None:
        with self.lock:
            self.pending.pop(uid, None)
            self._set(uid, None)

    def sweep(self, now: float | None = None) -> None:
        """Drop reservations whose bind ended :data:`PENDING_GRACE` s ago without an event."""
        now = time.monotonic() if now is None else now
        with self.lock:
            stale = [
                u for u, t in self.pending.items() if t is not None and now - t > PENDING_GRACE
            ]
            for uid in stale:
                self.release(uid)

    def _held(self, pod: Mapping[str, Any]) -> Decision | None:
        """What a pod holds: its decision when it is bound to that node and not finished.

        Only a decision consistent with the pod's requests counts (:mod:`.trusted`): a forged
        one (whole GPUs for a pod that asks none, negative shares) would block GPUs or let
        the extender over-commit them.
        """
        # A pod being deleted still runs until it is gone: it keeps its GPUs until then.
        if _phase(pod) in TERMINAL:
            return None
        node = (pod.get("spec") or {}).get("nodeName")
        decision, why = trusted_decision(pod)
        if why:
            meta = pod.get("metadata") or {}
            log.warning("pod %s/%s: %s", meta.get("namespace"), meta.get("name"), why)
        if decision is None or not node or decision.node != node:
            return None
        return decision

    def _kept(self, pod: Mapping[str, Any], held: Decision | None) -> Decision | None:
        """What ``pod`` holds, given ``held`` from the pod as it is now: the decision already
        counted for it while it stays bound to that node and unfinished.

        The extender writes a decision before it binds and never changes it afterwards, so a
        bound pod whose decision went away or changed was edited by someone else (a tenant,
        on a cluster without the admission policy): forgetting it would let the next bind
        put another pod's share on top of the GPU it still uses.
        """
        old = self.allocs.get(_uid(pod))
        if old is None or held == old or _phase(pod) in TERMINAL:
            return held
        if (pod.get("spec") or {}).get("nodeName") != old.node:
            return held
        meta = pod.get("metadata") or {}
        log.warning(
            "pod %s/%s: its decision was %s after it was bound to %s; it still holds %s",
            meta.get("namespace"),
            meta.get("name"),
            "removed" if held is None else "changed",
            old.node,
            old.to_json(),
        )
        return old

    def pod_event(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """One watch event of a pod (None: absent)."""
        with self.lock:
            if new is None:
                if old is not None:
                    uid = _uid(old)
                    self.pending.pop(uid, None)
                    self._set(uid, None)
                self.sweep()
                return
            uid = _uid(new)
            held = self._held(new)
            if held is None and uid in self.pending and _phase(new) not in TERMINAL:
                return  # our bind is in flight: the reservation stands
            held = self._kept(new, held)
            self.pending.pop(uid, None)
            self._set(uid, held)
            self.sweep()

    def set_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full listing: holdings become exactly those of ``pods`` (plus binds in flight)."""
        with self.lock:
            fresh: dict[str, Decision] = {}
            for pod in pods:
                held = self._kept(pod, self._held(pod))
                if held is not None:
                    fresh[_uid(pod)] = held
            for uid in self.pending:
                if uid not in fresh and uid in self.allocs:
                    fresh[uid] = self.allocs[uid]
            self.pending = {u: t for u, t in self.pending.items() if u in fresh}
            self.allocs = fresh
            self._by_node = {}
            for uid, d in fresh.items():
                self._by_node.setdefault(d.node, set()).add(uid)
            for node in self.nodes:
                self._recount(node)
            self.sweep()

    # -- reading ----------------------------------------------------------------------------
    def node(self, name: str) -> NodeView | None:
        return self.nodes.get(name)

    def summary(self, node: str | None = None) -> dict[str, Any]:
        """Counts; with ``node``, also that node's GPUs, their use and the holders."""
        with self.lock:
            out: dict[str, Any] = {
                "nodes": len(self.nodes),
                "gpus": sum(len(v.gpus) for v in self.nodes.values()),
                "pods": len(self.allocs),
                "pending": len(self.pending),
            }
            view = self.nodes.get(node) if node else None
            if view is not None:
                out["node"] = {
                    "gpus": {
                        b: {
                            "model": g.model,
                            "memory": g.memory,
                            "units": g.units,
                            "available": g.available,
                            "used": vars(view.use.get(b) or GpuUse()),
                        }
                        for b, g in view.gpus.items()
                    },
                    "holders": sorted(self._by_node.get(view.name, ())),
                }
            return out


def best_fit(view: NodeView, memory: int) -> int | None:
    """The least free memory, among the node's GPUs, that still holds ``memory`` MiB."""
    i = bisect.bisect_left(view.free_sorted, memory)
    return view.free_sorted[i] if i < len(view.free_sorted) else None


__all__ = ["MAX_CORES", "Gpu", "GpuUse", "NodeView", "State", "best_fit", "gpu_of"]
