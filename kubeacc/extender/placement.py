"""Where on one node a pod's containers go, and how good that is (0..10).

* Whole GPUs: untouched, available GPUs (of the container's model, or of the pod's best-ranked
  model that has enough); among them the topology-best set, by the same code as the device
  plugin's GetPreferredAllocation (fewest NUMA nodes, then PCIe roots/switches, then links).
* Shares: the GPU of the best-ranked model whose free memory fits most tightly (bin packing:
  whole GPUs stay free for whole-GPU pods), with enough free compute.

:func:`quick` answers the common pods (one container, no core share, no model wish) from the
node summary alone; everything else goes through :func:`place`, which walks the node's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeacc.extender.state import GpuUse, NodeView, best_fit
from kubeacc.extender.wants import MAX_CORES, Assigned, ContainerWant, Decision, PodWant
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
    return want.models.index(model) if model in want.models else 0


def _allowed(want: PodWant, c: ContainerWant, model: str) -> bool:
    if c.model is not None:
        return model == c.model
    return not want.models or model in want.models


def quick(view: NodeView, want: PodWant) -> Fit | None:
    """The answer from the summary alone, or None when the pod needs :func:`place`."""
    if len(want.containers) != 1 or want.models:
        return None
    c = want.containers[0]
    if c.shared:
        if c.cores:
            return None
        fit = best_fit(view, c.memory)
        if fit is None:
            return Fit(None, 0, _no_memory(view, c.memory))
        return Fit(None, _pack_score(view, c.memory, fit))
    if c.model is not None:
        return None
    if view.free_whole < c.whole:
        return Fit(None, 0, f"{c.whole} whole GPU(s) wanted, {view.free_whole} free")
    return Fit(None, MAX_SCORE if view.whole_one_numa >= c.whole else MAX_SCORE // 2)


def _no_memory(view: NodeView, memory: int) -> str:
    if view.max_free < 0:
        return "no available GPU"
    return f"no GPU with {memory} MiB free (most free on one GPU: {view.max_free} MiB)"


def _pack_score(view: NodeView, memory: int, free: int) -> int:
    """Tighter fit, higher score; a GPU nobody uses yet scores lowest."""
    biggest = max((g.memory for g in view.gpus.values()), default=0) or 1
    left = free - memory
    return max(1, MAX_SCORE - (MAX_SCORE * left) // biggest)


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
            by_model = [[b for b in free if gpus[b].model == m] for m in want.models]
            enough = [i for i, group in enumerate(by_model) if len(group) >= c.whole]
            if enough:
                free = by_model[enough[0]]
                worst_rank = max(worst_rank, enough[0])
        if len(free) < c.whole:
            what = f" of model {c.model}" if c.model else ""
            return Fit(None, 0, f"{c.whole} whole GPU(s){what} wanted, {len(free)} free")
        chosen = (
            preferred_allocation(view.graph(), free, [], c.whole) if len(free) > c.whole else free
        )
        for b in chosen:
            use[b].whole = True
        out.append(Assigned(c.name, tuple(chosen), whole=True))
        numas = len({gpus[b].numa for b in chosen})
        scores.append(MAX_SCORE if numas <= 1 else MAX_SCORE // numas)
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
    if want.models:  # the model wish weighs more than packing
        ranked = max(0, MAX_SCORE - RANK_PENALTY * worst_rank)
        base = (7 * ranked + 3 * base) // 10
    return Fit(Decision(view.name, tuple(out)), base)


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
    """Filter/prioritize answer for one node (no decision unless :func:`place` ran)."""
    if not view.gpus:
        return Fit(None, 0, "no kubeacc GPUs on this node")
    if want.largest_share > view.max_free:
        return Fit(None, 0, _no_memory(view, want.largest_share))
    if want.whole > view.free_whole:
        return Fit(None, 0, f"{want.whole} whole GPU(s) wanted, {view.free_whole} free")
    return quick(view, want) or place(view, want)
