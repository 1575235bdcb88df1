"""Best set of k devices: exact against exhaustive search; preferred allocation order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kubeacc.topology.bestset import (
    best_set,
    exhaustive_best_set,
    graph_best_set,
    preferred_allocation,
)
from kubeacc.topology.graph import TopologyGraph
from kubeacc.topology.layout import build_node

Query = tuple[TopologyGraph, int, list[int], list[int]]


@st.composite
def node_and_query(draw: st.DrawFn, n_max: int = 8) -> Query:
    numa = draw(st.integers(1, 2))
    roots = draw(st.integers(1, 2))
    switches = draw(st.integers(0, 2))
    per = draw(st.integers(1, 4))
    total = numa * roots * max(switches, 1) * per
    if total > n_max or total < 2:
        per = 1
        total = numa * roots * max(switches, 1)
    pairs = [(i, j) for i in range(total) for j in range(i + 1, total)]
    links = draw(st.lists(st.sampled_from(pairs), max_size=6, unique=True)) if pairs else []
    counts = draw(st.lists(st.integers(1, 6), min_size=len(links), max_size=len(links)))
    inv = build_node(
        numa,
        roots,
        switches,
        per,
        links=[(i, j, c) for (i, j), c in zip(links, counts, strict=True)],
        remote_distance=draw(st.sampled_from([12, 21, 32])),
    )
    g = TopologyGraph.from_inventory(inv)
    avail = draw(st.lists(st.integers(0, total - 1), min_size=1, unique=True))
    must = draw(st.lists(st.sampled_from(sorted(avail)), max_size=2, unique=True))
    k = draw(st.integers(max(1, len(must)), len(avail)))
    return g, k, sorted(avail), must


@settings(max_examples=150, deadline=None)
@given(node_and_query())
def test_best_set_is_exact_on_8_device_nodes(q: Query) -> None:
    g, k, avail, must = q
    got = graph_best_set(g, k, avail, must)
    ref = exhaustive_best_set(g.closeness, k, avail, must)
    assert got.exact
    assert got.score == ref.score
    assert set(must) <= set(got.members) <= set(avail)
    assert len(got.members) == k


@settings(max_examples=40, deadline=None)
@given(
    st.integers(9, 14).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.integers(1, 60), min_size=n * n, max_size=n * n),
            st.integers(2, n - 2),
        )
    )
)
def test_branch_and_bound_exact_on_random_matrices(q: tuple[int, list[int], int]) -> None:
    n, vals, k = q
    c = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            c[i][j] = c[j][i] = vals[i * n + j]
    got = best_set(c, k, budget=10**7, time_limit=60)
    assert got.exact
    assert got.score == exhaustive_best_set(c, k).score


def test_best_set_on_larger_node_is_fast_and_sane() -> None:
    g = TopologyGraph.from_inventory(build_node(2, 2, 2, 4))  # 32 devices
    res = graph_best_set(g, 4)
    switches = {g.switch_of(i) for i in res.members}
    assert len(switches) == 1  # four devices behind one switch


def test_preferred_allocation_numa_then_switch_then_links() -> None:
    # 2 NUMA x 2 roots x 1 switch x 2 devices; devices 6 and 7 are linked.
    inv = build_node(2, 2, 1, 2, links=[(6, 7, 4)])
    g = TopologyGraph.from_inventory(inv)
    names = [d.name for d in inv.devices]
    # Two devices: the linked pair wins over other same-switch pairs.
    assert set(preferred_allocation(g, names, [], 2)) == {names[6], names[7]}
    # Must include device 0: its switch partner.
    assert set(preferred_allocation(g, names, [names[0]], 2)) == {names[0], names[1]}
    # Three devices with 0,1 busy elsewhere: stay on NUMA node 1 (devices 4..7).
    got = preferred_allocation(g, names[2:], [], 3)
    assert {g.numa_of(i) for i in g.indices(got)} == {1}
    assert {names[6], names[7]} <= set(got)
    # Five devices span both nodes; all of must kept.
    got = preferred_allocation(g, names, [names[2]], 5)
    assert names[2] in got and len(got) == 5
