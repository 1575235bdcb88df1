"""Topology Manager merge rules, policies, scopes and options, table-driven."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kubeacc.topology.hints import ContainerRequest, ProviderHints, TopologyHint, mask_of
from kubeacc.topology.manager import (
    FunctionProvider,
    NUMAInfo,
    Policy,
    PolicyOptions,
    Scope,
    TopologyConfigError,
    TopologyManager,
    merge,
)

M = mask_of
T, F = True, False
H = TopologyHint
NUMA2 = NUMAInfo((0, 1))
# Four nodes where 0-2 and 1-3 are close, 0-1 far.
DIST4 = {0: [10, 32, 12, 32], 1: [32, 10, 32, 12], 2: [12, 32, 10, 32], 3: [32, 12, 32, 10]}
NUMA4 = NUMAInfo((0, 1, 2, 3), DIST4)

BE, RS, SN = Policy.BEST_EFFORT, Policy.RESTRICTED, Policy.SINGLE_NUMA_NODE

CASES: list[tuple[str, Policy, list[ProviderHints], TopologyHint, bool]] = [
    ("no providers: any", BE, [], H(M(0, 1), T), True),
    ("provider without hints: no preference", BE, [{}], H(M(0, 1), T), True),
    ("resource with nil hints: no preference", BE, [{"gpu": None}], H(M(0, 1), T), True),
    ("resource with no possible affinity", BE, [{"gpu": []}], H(M(0, 1), F), True),
    ("restricted rejects impossible", RS, [{"gpu": []}], H(M(0, 1), F), False),
    (
        "single provider narrowest preferred",
        RS,
        [{"gpu": [H(M(0), T), H(M(1), T), H(M(0, 1), F)]}],
        H(M(0), T),
        True,
    ),
    (
        "two providers agree on node 1",
        RS,
        [{"cpu": [H(M(1), T), H(M(0, 1), F)]}, {"gpu": [H(M(0), T), H(M(1), T)]}],
        H(M(1), T),
        True,
    ),
    (
        "preferred beats narrower non-preferred",
        BE,
        [{"cpu": [H(M(0), F), H(M(0, 1), T)]}],
        H(M(0, 1), T),
        True,
    ),
    (
        "unequal preferred masks merge to non-preferred",
        RS,
        [{"cpu": [H(M(0, 1), T)]}, {"gpu": [H(M(0), T)]}],
        H(M(0), F),
        False,
    ),
    (
        "disjoint masks are skipped",
        BE,
        [{"cpu": [H(M(0), T)]}, {"gpu": [H(M(1), T)]}],
        H(M(0, 1), F),
        True,
    ),
    (
        "non-preferred: aim for the widest provider minimum",
        BE,
        [{"cpu": [H(M(0), F), H(M(0, 1), F)]}, {"gpu": [H(M(0, 1), F)]}],
        H(M(0, 1), F),
        True,
    ),
    (
        "single-numa-node keeps single-node hints",
        SN,
        [{"gpu": [H(M(0), T), H(M(1), T), H(M(0, 1), F)]}],
        H(M(0), T),
        True,
    ),
    ("single-numa-node rejects a two-node need", SN, [{"gpu": [H(M(0, 1), T)]}], H(None, F), False),
    ("single-numa-node: no preference becomes any", SN, [{"gpu": None}], H(None, T), True),
    (
        "single-numa-node drops non-preferred single node",
        SN,
        [{"gpu": [H(M(1), F)]}],
        H(None, F),
        False,
    ),
]


@pytest.mark.parametrize(("name", "policy", "providers", "hint", "admit"), CASES)
def test_merge_table(
    name: str, policy: Policy, providers: list[ProviderHints], hint: TopologyHint, admit: bool
) -> None:
    assert merge(providers, policy, NUMA2) == (hint, admit), name


def test_none_policy_admits_everything_without_hint() -> None:
    assert merge([{"gpu": []}], Policy.NONE, NUMA2) == (H(None, F), True)


@pytest.mark.parametrize(
    ("closest", "expected"),
    [(False, M(0, 1)), (True, M(0, 2))],
)
def test_prefer_closest_numa_nodes(closest: bool, expected: int) -> None:
    # Every two-node mask is preferred; narrowest-then-lowest picks {0,1}, closest picks {0,2}.
    two = [H(M(a, b), T) for a in range(4) for b in range(a + 1, 4)]
    hint, ok = merge([{"gpu": two}], RS, NUMA4, PolicyOptions(prefer_closest_numa_nodes=closest))
    assert ok and hint.affinity == expected


def test_prefer_closest_still_prefers_narrower() -> None:
    hints = [H(M(0, 2), T), H(M(1), T)]
    hint, _ = merge([{"gpu": hints}], BE, NUMA4, PolicyOptions(prefer_closest_numa_nodes=True))
    assert hint.affinity == M(1)


def test_prefer_closest_ignored_by_single_numa_node() -> None:
    hint, ok = merge(
        [{"gpu": [H(M(2), T), H(M(0), T)]}],
        SN,
        NUMA4,
        PolicyOptions(prefer_closest_numa_nodes=True),
    )
    assert ok and hint.affinity == M(0)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"prefer-closest-numa-nodes": "true"}, None),
        ({"prefer-closest-numa-nodes": "maybe"}, "bad value"),
        ({"max-allowable-numa-nodes": "16"}, None),
        ({"max-allowable-numa-nodes": "4"}, "minimum"),
        ({"bogus": "1"}, "unknown"),
    ],
)
def test_policy_options(options: Mapping[str, str], error: str | None) -> None:
    if error is None:
        PolicyOptions.parse(options)
    else:
        with pytest.raises(TopologyConfigError, match=error):
            PolicyOptions.parse(options)


def test_more_than_eight_numa_nodes_refused_unless_allowed() -> None:
    nine = NUMAInfo(tuple(range(9)))
    with pytest.raises(TopologyConfigError, match="more than 8"):
        TopologyManager(nine, Policy.BEST_EFFORT)
    TopologyManager(nine, Policy.NONE)  # the none policy never looks at NUMA
    TopologyManager(nine, Policy.BEST_EFFORT, options=PolicyOptions(max_allowable_numa_nodes=9))


def _gpu_provider(free: dict[str, list[int]]) -> FunctionProvider:
    from kubeacc.topology.hints import device_hints

    def fn(req: Mapping[str, int]) -> ProviderHints:
        n = req.get("gpu", 0)
        if not n:
            return None
        return {"gpu": device_hints([0, 1], free, list(free), n)}

    return FunctionProvider(fn)


@pytest.mark.parametrize(
    ("scope", "admit"),
    [(Scope.CONTAINER, True), (Scope.POD, False)],
)
def test_scopes(scope: Scope, admit: bool) -> None:
    # Two GPUs per NUMA node; two containers asking two each. Container scope: each fits a
    # single node. Pod scope: four GPUs need both nodes -> single-numa-node rejects.
    free = {"a": [0], "b": [0], "c": [1], "d": [1]}
    tm = TopologyManager(NUMA2, SN, scope, providers=[_gpu_provider(free)])
    res = tm.admit([ContainerRequest("x", {"gpu": 2}), ContainerRequest("y", {"gpu": 2})])
    assert res.admit is admit
    if not admit:
        assert "Topology Affinity Error" in res.reason
