"""The best set of k devices: maximise the link score (sum of pairwise closeness).

Algorithm (see docs/placement.md): a greedy seed plus swap local search gives an incumbent;
then a depth-first branch-and-bound over the candidates proves it optimal or improves it. The
bound for a partial set S with r devices still to pick is

    score(S) + sum of the r largest  [ gain_S(v) + half of v's (r-1) largest closeness values ]

over the remaining candidates v — each future pair is counted half from each end, so this never
underestimates. Devices that are interchangeable (same NUMA node, root and switch, no direct
links: identical closeness rows) form symmetry classes; within a class only prefixes are
explored, which collapses the search on regular machines. A node budget caps the search; the
result says whether it is proven optimal.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from math import comb

from kubeacc.topology.graph import TopologyGraph

#: Up to this many subsets, plain enumeration beats setting up the search.
ENUMERATE_LIMIT = 400


@dataclass(frozen=True)
class BestSet:
    members: tuple[int, ...]
    score: int
    exact: bool
    explored: int = 0


def set_score(closeness: Sequence[Sequence[int]], members: Iterable[int]) -> int:
    m = list(members)
    return sum(closeness[a][b] for x, a in enumerate(m) for b in m[x + 1 :])


def exhaustive_best_set(
    closeness: Sequence[Sequence[int]],
    k: int,
    available: Iterable[int] | None = None,
    must_include: Iterable[int] = (),
) -> BestSet:
    """Reference: try every subset (for tests and small nodes)."""
    must = sorted(set(must_include))
    pool = sorted(set(range(len(closeness)) if available is None else available) - set(must))
    r = k - len(must)
    if r < 0 or r > len(pool):
        raise ValueError(f"cannot pick {k} devices from {len(pool) + len(must)}")
    best: tuple[int, ...] = ()
    best_score = -1
    count = 0
    for combo in combinations(pool, r):
        count += 1
        s = set_score(closeness, (*must, *combo))
        if s > best_score:
            best, best_score = tuple(sorted((*must, *combo))), s
    return BestSet(best, best_score, True, count)


def _symmetry_classes(
    c: Sequence[Sequence[int]], cands: Sequence[int], keys: Sequence[Hashable] | None
) -> dict[int, int]:
    """Class id per candidate; members of one class are interchangeable."""
    out: dict[int, int] = {}
    if keys is None:
        return {v: v for v in cands}
    groups: dict[Hashable, list[int]] = {}
    for v in cands:
        groups.setdefault(keys[v], []).append(v)
    n = len(c)
    for members in groups.values():
        rep = members[0]
        out[rep] = rep
        inside = set(members)
        inner = c[rep][members[1]] if len(members) > 1 else 0
        for v in members[1:]:
            same = all(c[v][x] == c[rep][x] for x in range(n) if x not in inside) and all(
                c[v][w] == inner for w in members if w != v
            )
            out[v] = rep if same else v
    return out


def _greedy(c: Sequence[Sequence[int]], start: list[int], pool: list[int], k: int) -> list[int]:
    chosen = list(start)
    gain = {v: sum(c[m][v] for m in chosen) for v in pool if v not in chosen}
    while len(chosen) < k and gain:
        v = max(gain, key=lambda x: (gain[x], -x))
        chosen.append(v)
        del gain[v]
        row = c[v]
        for w in gain:
            gain[w] += row[w]
    return chosen


def _local_search(
    c: Sequence[Sequence[int]], chosen: list[int], fixed: set[int], pool: list[int]
) -> list[int]:
    """Swap one free member for one outsider while that improves the score."""
    inset = set(chosen)
    improved = True
    rounds = 0
    while improved and rounds < 50:
        improved = False
        rounds += 1
        gain = {v: sum(c[m][v] for m in inset) for v in pool}
        for x in list(inset - fixed):
            for y in pool:
                if y in inset:
                    continue
                delta = gain[y] - c[x][y] - gain[x]
                if delta > 0:
                    inset.remove(x)
                    inset.add(y)
                    improved = True
                    break
            if improved:
                break
    return sorted(inset)


def best_set(
    closeness: Sequence[Sequence[int]],
    k: int,
    available: Iterable[int] | None = None,
    must_include: Iterable[int] = (),
    *,
    symmetry_keys: Sequence[Hashable] | None = None,
    budget: int = 20000,
    time_limit: float = 0.006,
) -> BestSet:
    """The k-subset of ``available`` (all devices if None) containing ``must_include`` with the
    highest link score. ``symmetry_keys`` (one per device; equal keys = structurally alike) lets
    the search skip mirror images; keys are verified against the matrix, so a wrong key only
    costs speed. ``budget`` caps branch-and-bound nodes and ``time_limit`` (seconds) its time;
    when either stops the search the best set found so far is returned with ``exact=False``."""
    c = closeness
    must = sorted(set(must_include))
    avail = set(range(len(c)) if available is None else available)
    pool = sorted(avail - set(must))
    r = k - len(must)
    if r < 0 or r > len(pool):
        raise ValueError(f"cannot pick {k} devices from {len(pool) + len(must)}")
    if r == 0 or r == len(pool):
        members = tuple(sorted(must if r == 0 else must + pool))
        return BestSet(members, set_score(c, members), True)
    if comb(len(pool), r) <= ENUMERATE_LIMIT:
        return exhaustive_best_set(c, k, pool + must, must)
    deadline = time.perf_counter() + time_limit
    # Incumbent: greedy from the must set, or from the most promising single devices.
    if must:
        seeds = [must]
    else:
        top = sorted(pool, key=lambda v: -sum(heapq.nlargest(r - 1, (c[v][w] for w in pool))))
        seeds = [[v] for v in top[: min(len(top), 3)]]
    best_members: list[int] = []
    best_score = -1
    fixed = set(must)
    for seed in seeds:
        cand = _local_search(c, _greedy(c, seed, pool + must, k), fixed, pool)
        s = set_score(c, cand)
        if s > best_score:
            best_members, best_score = cand, s
    # Branch and bound. Order: incumbent members first, then by potential.
    half_pref: dict[int, list[float]] = {}
    for v in pool:
        vals = sorted((c[v][w] for w in pool if w != v), reverse=True)[:r]
        acc = [0.0]
        for x in vals:
            acc.append(acc[-1] + x / 2)
        half_pref[v] = acc
    inc = set(best_members)
    order = sorted(pool, key=lambda v: (v not in inc, -half_pref[v][-1], v))
    cls = _symmetry_classes(c, order, symmetry_keys)
    gain = [0] * len(c)
    for m in must:
        row = c[m]
        for v in pool:
            gain[v] += row[v]
    base = set_score(c, must)
    explored = 0
    exhausted = False
    chosen: list[int] = []
    npos = len(order)

    def bound(pos: int, left: int, closed: set[int]) -> float:
        vals = [gain[v] + half_pref[v][left - 1] for v in order[pos:] if cls[v] not in closed]
        if len(vals) < left:
            return -1.0
        return sum(heapq.nlargest(left, vals))

    def dfs(pos: int, cur: int, closed: frozenset[int]) -> None:
        nonlocal best_score, best_members, explored, exhausted
        explored += 1
        if explored > budget or (explored & 15 == 0 and time.perf_counter() > deadline):
            exhausted = True
            return
        left = r - len(chosen)
        if left == 0:
            if cur > best_score:
                best_score, best_members = cur, sorted(must + chosen)
            return
        if npos - pos < left:
            return
        if cur + bound(pos, left, set(closed)) <= best_score:
            return
        v = order[pos]
        if cls[v] in closed:
            dfs(pos + 1, cur, closed)
            return
        # include v
        chosen.append(v)
        row = c[v]
        for w in order:
            gain[w] += row[w]
        dfs(pos + 1, cur + gain[v] - row[v], closed)
        for w in order:
            gain[w] -= row[w]
        chosen.pop()
        if exhausted:
            return
        # exclude v: its whole class is closed (members are taken as prefixes only)
        dfs(pos + 1, cur, closed | {cls[v]})

    dfs(0, base, frozenset())
    return BestSet(tuple(best_members), best_score, not exhausted, explored)


def graph_best_set(
    graph: TopologyGraph,
    k: int,
    available: Iterable[int] | None = None,
    must_include: Iterable[int] = (),
    *,
    budget: int = 20000,
    time_limit: float = 0.006,
) -> BestSet:
    keys = [
        (graph.numa_of(i), graph.root_of(i), graph.switch_of(i), bool(any(graph.links[i])))
        if not any(graph.links[i])
        else ("linked", i)
        for i in range(len(graph))
    ]
    return best_set(
        graph.closeness,
        k,
        available,
        must_include,
        symmetry_keys=keys,
        budget=budget,
        time_limit=time_limit,
    )


def preferred_allocation(
    graph: TopologyGraph,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> list[str]:
    """The device plugin's GetPreferredAllocation: ``size`` devices from ``available``
    including all of ``must_include``; fewest NUMA nodes first, then fewest PCIe roots and
    switches spanned, then the strongest links (highest link score). Names or BDFs in, the same
    spelling out (as given in ``available``/``must_include``)."""
    names = list(dict.fromkeys([*must_include, *available]))
    idx = graph.indices(names)
    by_idx = dict(zip(idx, names, strict=True))
    must = graph.indices(must_include)
    if size <= len(must):
        return list(must_include)[:size] if size < len(must) else list(must_include)
    if size >= len(idx):
        return names
    # Stage 1: the fewest NUMA nodes that hold enough devices (including the must set).
    numa_of = {i: graph.numa_of(i) for i in idx}
    must_numa = {numa_of[i] for i in must}
    nodes = sorted({numa_of[i] for i in idx})
    best_subset: tuple[int, ...] | None = None
    for w in range(1, len(nodes) + 1):
        options = []
        for combo in combinations(nodes, w):
            if not must_numa <= set(combo):
                continue
            inside = [i for i in idx if numa_of[i] in combo]
            if len(inside) >= size:
                options.append(inside)
        if options:
            results = []
            for inside in options:
                results.append(_tiered_best(graph, size, inside, must))
            best_subset = max(results, key=lambda t: t[0])[1]
            break
    if best_subset is None:
        best_subset = _tiered_best(graph, size, idx, must)[1]
    return [by_idx[i] for i in sorted(best_subset, key=idx.index)]


def _tiered_best(
    graph: TopologyGraph, size: int, inside: Sequence[int], must: Sequence[int]
) -> tuple[tuple[int, int, int], tuple[int, ...]]:
    """Best set inside a NUMA group, keyed by (-roots spanned, -switches spanned, link score)."""
    res = graph_best_set(graph, size, inside, must)
    roots = {graph.root_of(i) for i in res.members}
    switches = {graph.switch_of(i) for i in res.members}
    return (-len(roots), -len(switches), res.score), res.members
