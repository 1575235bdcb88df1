"""Which GPUs serve a request of normalized units (``kubeacc.io/gpu-units``) on one node.

From the node's untouched GPUs per model: the models the pod accepts (its ranking, if any,
first), then the fewest GPUs, then the least waste (units given beyond those asked). GPUs of
one model only, unless the pod allows mixing; then the fewest GPUs of any accepted models,
with the least waste among the ways of picking that many.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kubeacc.contracts.wants import PodWant

MAX_SCORE = 10
#: Ways of splitting a mixed request over models tried at most (then: largest GPUs first).
MAX_SPLITS = 5000


@dataclass(frozen=True)
class UnitsChoice:
    #: (model, number of its GPUs), largest GPUs first.
    counts: tuple[tuple[str, int], ...]
    gpus: int
    given: int
    rank: int


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def choose(
    asked: int, free: Mapping[str, int], units: Mapping[str, int], want: PodWant
) -> UnitsChoice | None:
    """The best choice on a node with ``free`` untouched GPUs per model of ``units`` each."""
    ok: list[tuple[int, int, str, int]] = []  # (rank, units per GPU, model, free)
    for model, n in free.items():
        u = units.get(model, 0)
        r = want.rank(model)
        if n > 0 and u > 0 and r is not None:
            ok.append((r, u, model, n))
    if not ok:
        return None
    best: UnitsChoice | None = None
    for r, u, model, n in ok:
        k = _ceil(asked, u)
        if k <= n:
            c = UnitsChoice(((model, k),), k, k * u, r)
            if best is None or _key(c, asked) < _key(best, asked):
                best = c
    if want.mix:
        mixed = _mixed(asked, ok)
        if mixed is not None and (best is None or _key(mixed, asked) < _key(best, asked)):
            best = mixed
    return best


def _key(c: UnitsChoice, asked: int) -> tuple[int, int, int, int, tuple[tuple[str, int], ...]]:
    """Rank, fewest GPUs, least waste, one model rather than several."""
    return (c.rank, c.gpus, c.given - asked, len(c.counts), c.counts)


def _mixed(asked: int, ok: list[tuple[int, int, str, int]]) -> UnitsChoice | None:
    ok = sorted(ok, key=lambda t: (-t[1], t[0], t[2]))
    total = k = 0
    greedy = [0] * len(ok)
    for i, (_, u, _, n) in enumerate(ok):
        take = min(n, _ceil(asked - total, u))
        greedy[i] = take
        total += take * u
        k += take
        if total >= asked:
            break
    if total < asked:
        return None
    best: tuple[int, tuple[int, ...]] = (total, tuple(greedy))
    for i, split in enumerate(_splits(k, [n for _, _, _, n in ok])):
        if i >= MAX_SPLITS:
            break
        given = sum(c * u for c, (_, u, _, _) in zip(split, ok, strict=True))
        if asked <= given < best[0]:
            best = (given, split)
    given, split = best
    counts = tuple((m, c) for c, (_, _, m, _) in zip(split, ok, strict=True) if c)
    rank = max(r for c, (r, _, _, _) in zip(split, ok, strict=True) if c)
    return UnitsChoice(counts, k, given, rank)


def _splits(k: int, limits: list[int]) -> Iterator[tuple[int, ...]]:
    """Every way of taking ``k`` GPUs with at most ``limits[i]`` of model i (largest first)."""
    if not limits:
        if k == 0:
            yield ()
        return
    rest = sum(limits[1:])
    for c in range(min(k, limits[0]), max(0, k - rest) - 1, -1):
        for tail in _splits(k - c, limits[1:]):
            yield (c, *tail)


def score(c: UnitsChoice, asked: int, one_numa: bool) -> int:
    """Fewer GPUs, then less waste, then one NUMA node: higher."""
    s = MAX_SCORE - 2 * (c.gpus - 1) - (2 * (c.given - asked)) // max(c.given, 1)
    return max(1, s - (0 if one_numa else 1))


def refusal(asked: int, free: Mapping[str, int], units: Mapping[str, int], want: PodWant) -> str:
    accepted = [m for m in sorted(free) if want.rank(m) is not None and free[m] > 0]
    if not accepted:
        return f"{asked} units wanted: no free GPU of an accepted model"
    unknown = [m for m in accepted if not units.get(m)]
    have = ", ".join(f"{m}: {free[m]} free x {units[m]}" for m in accepted if units.get(m))
    if not have:
        return f"{asked} units wanted: no unit table entry for {', '.join(unknown)}"
    how = "together" if want.mix else "from one model"
    return f"{asked} units wanted, not reachable {how} ({have} units)"
