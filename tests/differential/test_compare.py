"""The engine and kube-scheduler's own allocator agree on a seeded corpus.

Every claim of every scenario is judged on every node by both (the Go harness runs
k8s.io/dynamic-resource-allocation/structured v0.36.3 with kube-scheduler 1.36's default
feature gates). Feasibility must agree exactly; where both allocate, the engine's allocation
must be accepted by the scheduler's allocator when the scenario is pinned to it. The corpus
must exercise every feature the engine claims.
"""

from __future__ import annotations

import pytest

from kubeacc.differential.compare import run_range
from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.differential.validator import pinned_scenario

#: the CI corpus: seeds [CI_SEED_START, CI_SEED_START + CI_SEEDS)
CI_SEED_START = 0
CI_SEEDS = 300

FEATURES = {
    "admin-access",
    "all-mode",
    "bool-vs-int",
    "capacity-requests",
    "cel",
    "cel-bind",
    "cel-bool-int",
    "cel-compile-error",
    "cel-cost",
    "cel-environment",
    "cel-error",
    "cel-has",
    "cel-in",
    "cel-ip",
    "cel-lists-ext",
    "cel-macro",
    "cel-optional",
    "cel-quantity-error",
    "cel-regex",
    "cel-sets",
    "cel-strings-ext",
    "cel-two-var",
    "cel-unicode",
    "cel-url",
    "class-selectors",
    "constraints",
    "constraints-over-subrequests",
    "consumable-capacity",
    "counters",
    "distinct-attribute",
    "duplicate-names",
    "existing-allocations",
    "first-available",
    "generations",
    "incomplete-pools",
    "limits",
    "network-attributes",
    "node-selection",
    "qualified-capacity",
    "quantity",
    "taints",
    "tolerations",
    "version",
}


def test_engine_agrees_with_the_scheduler_allocator(go_allocator: GoAllocator) -> None:
    report = run_range(CI_SEED_START, CI_SEEDS, go_allocator)
    summary = report.summary()
    assert report.disagreements == [], summary
    assert report.invalid_picks == [], summary
    assert set(report.coverage) >= FEATURES, FEATURES - set(report.coverage)
    # Enough of both answers to mean something.
    assert report.both_allocate > CI_SEEDS // 3
    assert report.pairs - report.both_allocate > CI_SEEDS // 3


def test_generator_is_deterministic() -> None:
    assert scenario(42) == scenario(42)
    assert scenario(42) != scenario(43)


def test_validator_rejects_an_allocation_the_scheduler_cannot_make(
    go_allocator: GoAllocator,
) -> None:
    # Find a claim both allocate, then hand the validator a device of another node.
    for seed in range(50):
        scen, _ = scenario(seed)
        rows = go_allocator.pairs(scen)
        for ci, row in enumerate(rows):
            ok = row[0]
            if not ok["ok"] or not ok["allocation"]["devices"]["results"]:
                continue
            alloc = ok["allocation"]
            assert go_allocator.pairs(pinned_scenario(scen, scen["claims"][ci], "n0", alloc))[0][0][
                "ok"
            ]
            bad = {
                "devices": {
                    "results": [{**r, "pool": "pool-n1"} for r in alloc["devices"]["results"]]
                }
            }
            if any(r["pool"] == "pool-n1" for r in alloc["devices"]["results"]):
                continue
            check = go_allocator.pairs(pinned_scenario(scen, scen["claims"][ci], "n0", bad))
            assert not check[0][0]["ok"]
            return
    pytest.fail("no seed in 0..49 with a claim allocated on n0")
