"""Where on one node a pod's containers go, and how good that is (0..10).

* Whole GPUs: untouched, available GPUs (of the container's model, or of the pod's best-ranked
  model that has enough); among them the topology-best set, by the same code as the device
  plugin's GetPreferredAllocation (fewest NUMA nodes, then PCIe roots/switches, then links).
* Shares: the GPU of the best-ranked model whose free memory fits most tightly (bin packing:
  whole GPUs stay free for whole-GPU pods), with enough free compute.

:func:`matcher` answers pods of one container from the node summary (filter and prioritize
run it for thousands of nodes per pod); :func:`place` walks the node's GPUs and decides (bind,
and pods of several containers).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from kubeacc.contracts.wants import MAX_CORES, Assigned, ContainerWant, Decision, PodWant
from kubeacc.extender import unitsfit
from kubeacc.extender.state import GpuUse, NodeView
from kubeacc.topology.bestset import preferred_allocation

MAX_SCORE = 10
#: Score lost per rank step down the pod's model list.
RANK_PENALTY = 3


@dataclass(frozen=True)
class Fit:
    decision: Decision | None
    score: int
    reason: str = ""


def _rank(want: PodWant, model: str) -> int:
    return want.rank(model) or 0


def _allowed(want: PodWant, c: ContainerWant, model: str) -> bool:
    if c.model is not None:
        return model == c.model
    return want.rank(model) is not None


Match = Callable[[NodeView], tuple[int, str]]


def matcher(want: PodWant) -> Match:
    """A function node -> (score, reason; "" when it fits) for ``want``, built once per request.

    Pods with one container (a share, or whole GPUs) are answered from the node's summary
    (:attr:`NodeView.slots`, sorted by free memory: a bisection finds the tightest GPU);
    anything else runs :func:`place`.
    """
    return _memoized(want, _matcher(want))


def plain_matcher(want: PodWant) -> Match:
    """:func:`matcher` without the per-node memo (for callers that keep answers themselves)."""
    return _matcher(want)


#: Wants a node remembers answers for, at most (the memo is emptied when the node changes).
MEMO_SIZE = 32


def want_key(want: PodWant) -> tuple[object, ...]:
    """What a node's answer for ``want`` depends on (pods alike share their answers)."""
    return (
        tuple((c.whole, c.model, c.memory, c.cores, c.units) for c in want.containers),
        want.models,
        want.mix,
    )


def _memoized(want: PodWant, match: Match) -> Match:
    key = want_key(want)

    def cached(view: NodeView) -> tuple[int, str]:
        memo = view.memo
        got = memo.get(key)
        if got is None:
            got = match(view)
            if len(memo) >= MEMO_SIZE:
                memo.clear()
            memo[key] = got
        return got

    return cached


def grouping(want: PodWant) -> str | None:
    """Which of the node's signatures (``NodeView.keys``, ``state.SIGNATURES``) decides its
    answer for ``want`` under :func:`plain_matcher`: nodes of one signature answer alike.
    None: the answer reads more (a node's GPUs one by one, its topology)."""
    if len(want.containers) != 1:
        return None
    c = want.containers[0]
    if c.shared:
        return "share" if c.cores or want.models else "memory"
    if c.units and not want.mix:
        return "whole"
    if c.units or (c.model is None and want.models):
        return None
    return "whole"


def _matcher(want: PodWant) -> Match:
    if len(want.containers) != 1:
        return lambda view: _from_fit(place(view, want)) if view.gpus else (0, NO_GPUS)
    c = want.containers[0]
    if c.shared:
        return _share_matcher(want, c)
    if c.units and not want.mix:
        return _units_matcher(want, c)
    if c.units or (c.model is None and want.models):
        return lambda view: _from_fit(place(view, want)) if view.gpus else (0, NO_GPUS)
    return _whole_matcher(c)


NO_GPUS = "no kubeacc GPUs on this node"
NO_SHARES = "no GPU takes shares (all held whole or unhealthy)"


def _from_fit(f: Fit) -> tuple[int, str]:
    return f.score, f.reason


def _share_matcher(want: PodWant, c: ContainerWant) -> Match:
    memory, cores, models = c.memory, c.cores, want.models
    rank = want.rank

    def match(view: NodeView) -> tuple[int, str]:
        fs = view.free_sorted
        if not fs:
            return 0, NO_GPUS if not view.gpus else NO_SHARES
        if fs[-1] < memory:
            return 0, _no_memory(view, memory)
        i = bisect_left(fs, memory)
        if not cores and not models:
            return _pack_score(view, memory, fs[i]), ""
        best: tuple[int, int] | None = None
        for free, free_cores, model in view.slots[i:]:
            if free_cores < cores:
                continue
            if models:
                r = rank(model)
                if r is None:
                    continue
            else:
                r = 0
            if best is None or (r, free) < best:
                best = (r, free)
                if r == 0:
                    break  # ascending free memory: the first of the best rank fits tightest
        if best is None:
            return 0, _share_reason(view, want, c)
        score = _pack_score(view, memory, best[1])
        if models:
            score = _ranked(score, best[0])
        return score, ""

    return match


def _whole_matcher(c: ContainerWant) -> Match:
    k, model = c.whole, c.model

    def match(view: NodeView) -> tuple[int, str]:
        if not view.gpus:
            return 0, NO_GPUS
        free = view.free_whole if model is None else view.whole_by_model.get(model, 0)
        if free < k:
            what = f" of model {model}" if model else ""
            return 0, f"{k} whole GPU(s){what} wanted, {free} free"
        return (MAX_SCORE if view.whole_one_numa >= k else MAX_SCORE // 2), ""

    return match


def _units_matcher(want: PodWant, c: ContainerWant) -> Match:
    asked = c.units

    def match(view: NodeView) -> tuple[int, str]:
        if not view.gpus:
            return 0, NO_GPUS
        free, units = view.whole_by_model, view.units_by_model
        got = unitsfit.choose(asked, free, units, want)
        if got is None:
            return 0, unitsfit.refusal(asked, free, units, want)
        numa = view.whole_numa_by_model
        one_numa = len(got.counts) == 1 and numa.get(got.counts[0][0], 0) >= got.gpus
        score = unitsfit.score(got, asked, one_numa)
        return (_ranked(score, got.rank) if want.models else score), ""

    return match


def _ranked(base: int, rank: int) -> int:
    """The model wish weighs more than packing."""
    ranked = max(0, MAX_SCORE - RANK_PENALTY * rank)
    return (7 * ranked + 3 * base) // 10


def _no_memory(view: NodeView, memory: int) -> str:
    if view.max_free < 0:
        return NO_SHARES
    return f"no GPU with {memory} MiB free (most free on one GPU: {view.max_free} MiB)"


def _pack_score(view: NodeView, memory: int, free: int) -> int:
    """Tighter fit, higher score; a GPU nobody uses yet scores lowest."""
    left = free - memory
    return max(1, MAX_SCORE - (MAX_SCORE * left) // view.biggest)


def place(view: NodeView, want: PodWant) -> Fit:
    """Exact placement of every container of ``want`` on ``view``'s node."""
    use = {b: GpuUse(u.memory, u.cores, u.shares, u.whole) for b, u in view.use.items()}
    gpus = {b: g for b, g in view.gpus.items() if g.available and b in use}
    out: list[Assigned] = []
    scores: list[int] = []
    worst_rank = 0
    wholes = sorted((c for c in want.containers if c.whole), key=lambda c: -c.whole)
    shares = sorted((c for c in want.containers if c.shared), key=lambda c: -c.memory)
    for c in wholes:
        free = [b for b, g in gpus.items() if use[b].untouched and _allowed(want, c, g.model)]
        if c.model is None and want.models:
            ranks = sorted({_rank(want, gpus[b].model) for b in free})
            by_rank = [[b for b in free if _rank(want, gpus[b].model) == r] for r in ranks]
            enough = [i for i, group in enumerate(by_rank) if len(group) >= c.whole]
            if enough:
                free = by_rank[enough[0]]
                worst_rank = max(worst_rank, ranks[enough[0]])
        if len(free) < c.whole:
            what = f" of model {c.model}" if c.model else ""
            return Fit(None, 0, f"{c.whole} whole GPU(s){what} wanted, {len(free)} free")
        chosen = _best_set(view, free, c.whole)
        for b in chosen:
            use[b].whole = True
        out.append(Assigned(c.name, tuple(chosen), whole=True))
        numas = len({gpus[b].numa for b in chosen})
        scores.append(MAX_SCORE if numas <= 1 else MAX_SCORE // numas)
    for c in (c for c in want.containers if c.units):
        untouched: dict[str, list[str]] = {}
        for b, g in gpus.items():
            if use[b].untouched:
                untouched.setdefault(g.model, []).append(b)
        free_n = {m: len(bs) for m, bs in untouched.items()}
        units = {g.model: g.units for g in gpus.values()}
        got = unitsfit.choose(c.units, free_n, units, want)
        if got is None:
            return Fit(None, 0, unitsfit.refusal(c.units, free_n, units, want))
        chosen = []
        for model, k in got.counts:
            group = untouched[model]
            chosen += _best_set(view, group, k)
        for b in chosen:
            use[b].whole = True
        worst_rank = max(worst_rank, got.rank)
        out.append(Assigned(c.name, tuple(chosen), whole=True, units=c.units))
        scores.append(unitsfit.score(got, c.units, len({gpus[b].numa for b in chosen}) == 1))
    for c in shares:
        best: tuple[int, int, str] | None = None
        for b, g in gpus.items():
            u = use[b]
            if u.whole or not _allowed(want, c, g.model):
                continue
            left = g.memory - u.memory - c.memory
            if left < 0 or u.cores + c.cores > MAX_CORES:
                continue
            key = (_rank(want, g.model), left, b)
            if best is None or key < best:
                best = key
        if best is None:
            return Fit(None, 0, _share_reason(view, want, c))
        rank, left, b = best
        worst_rank = max(worst_rank, rank)
        room = gpus[b].memory - use[b].memory
        use[b].memory += c.memory
        use[b].cores += c.cores
        use[b].shares += 1
        out.append(Assigned(c.name, (b,), memory=c.memory, cores=c.cores))
        scores.append(_pack_score(view, c.memory, room))
    base = sum(scores) // len(scores) if scores else MAX_SCORE
    order = {c.name: i for i, c in enumerate(want.containers)}
    out.sort(key=lambda a: order[a.container])
    if want.models:
        base = _ranked(base, worst_rank)
    return Fit(Decision(view.name, tuple(out)), base)


def _best_set(view: NodeView, free: list[str], k: int) -> list[str]:
    """The topology-best ``k`` of ``free`` (GetPreferredAllocation's code)."""
    if len(free) <= k:
        return free
    if any(view.gpus[b].device is None for b in free):  # no topology known: in order
        return sorted(free)[:k]
    return preferred_allocation(view.graph(), free, [], k)


def _share_reason(view: NodeView, want: PodWant, c: ContainerWant) -> str:
    models = [g.model for g in view.gpus.values() if g.available]
    if not models:
        return "no available GPU"
    if not any(_allowed(want, c, m) for m in models):
        return (
            f"no GPU of model {', '.join(want.models)} (node has {', '.join(sorted(set(models)))})"
        )
    cores = f" and {c.cores}% compute" if c.cores else ""
    return (
        f"no GPU with {c.memory} MiB{cores} free "
        f"(most free on one GPU: {max(view.max_free, 0)} MiB)"
    )


def fit(view: NodeView, want: PodWant) -> Fit:
    """Filter/prioritize answer for one node (no decision: that is :func:`place`'s)."""
    score, reason = matcher(want)(view)
    return Fit(None, 0 if reason else score, reason)
