"""The engine and kube-scheduler's own allocator agree on a seeded corpus.

Every pod (1-3 claims, allocated together) of every scenario is judged on every node by both (the
Go harness runs k8s.io/dynamic-resource-allocation/structured v0.37.2 with kube-scheduler 1.37's
feature gates of the main lane, kubeacc.differential.build.DEFAULT, and the engine follows that
release; a smaller corpus checks v0.36.3 with the engine following 1.36). Errors that fail the pod
and feasibility must agree exactly; where both allocate, the engine's allocations must be the
scheduler's (same consumed capacity) or be accepted by the scheduler's allocator when the scenario
is pinned to them. The corpus must exercise every feature the engine claims.
"""

from __future__ import annotations

import pytest

from kubeacc.differential.compare import Report, compare_seed, run_range
from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.differential.validator import pinned_pod, pinned_scenario

#: the CI corpus: seeds [CI_SEED_START, CI_SEED_START + CI_SEEDS)
CI_SEED_START = 0
CI_SEEDS = 300
#: the compatibility corpus (v1.36.3's allocator, the engine following 1.36)
CI_136_SEEDS = 200

FEATURES = {
    "admin-access",
    "all-mode",
    "binding-conditions",
    "bool-vs-int",
    "capacity-requests",
    "capacity-range-edges",
    "capacity-unrepresentable",
    "cel",
    "cel-bind",
    "cel-bool-int",
    "cel-compile-error",
    "cel-cost",
    "cel-cross-numeric",
    "cel-environment",
    "cel-error",
    "cel-format-library",
    "cel-format-library-compile-error",
    "cel-format-library-error",
    "cel-has",
    "cel-has-domain",
    "cel-compile-member",
    "cel-in",
    "cel-ip",
    "cel-ip-string",
    "cel-list-index",
    "cel-long-comprehension",
    "cel-lists-ext",
    "cel-macro",
    "cel-optional",
    "cel-quantity-error",
    "cel-regex",
    "cel-renamed",
    "cel-sets",
    "cel-strings-ext",
    "cel-transform-map",
    "cel-two-var",
    "cel-unicode",
    "cel-url",
    "class-selectors",
    "compatibility-groups",
    "constraints",
    "constraints-over-subrequests",
    "consumable-capacity",
    "counters",
    "distinct-attribute",
    "distinct-versions",
    "duplicate-names",
    "existing-allocations",
    "first-available",
    "generations",
    "generations-older",
    "incomplete-pools",
    "limits",
    "network-attributes",
    "node-selection",
    "pod-errors",
    "pods",
    "pods-allocated",
    "qualified-capacity",
    "quantity",
    "quantity-representation",
    "taint-none",
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


def test_engine_following_136_agrees_with_the_136_allocator(
    go_allocator_136: GoAllocator,
) -> None:
    assert go_allocator_136.release == "v1.36.3"
    report = run_range(CI_SEED_START, CI_136_SEEDS, go_allocator_136)
    summary = report.summary()
    assert report.disagreements == [], summary
    assert report.invalid_picks == [], summary
    assert report.both_allocate > CI_136_SEEDS // 3


def test_engine_prefers_no_device_whose_capacity_check_fails_the_pod(
    go_allocator: GoAllocator,
) -> None:
    # Seed 1140: a -4Gi request; first fit takes a device whose validValues round it up, and
    # the engine's own search preferred a later device that consumes -4Gi, which fails the pod
    # where the scheduler's search reaches it (it does not): the engine must keep first fit's.
    report = Report()
    compare_seed(1140, go_allocator, report)
    assert report.disagreements == [] and report.invalid_picks == []
    assert report.both_allocate > 0


def test_generator_is_deterministic() -> None:
    assert scenario(42) == scenario(42)
    assert scenario(42) != scenario(43)


def test_validator_rejects_an_allocation_the_scheduler_cannot_make(
    go_allocator: GoAllocator,
) -> None:
    # Find a claim both allocate, then hand the validator a device of another node.
    for seed in range(50):
        scen, _ = scenario(seed)
        del scen["pods"]  # each claim a pod of its own: one row (and allocation) per claim
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


def test_harness_allocates_a_pods_claims_together(go_allocator: GoAllocator) -> None:
    # One h100 and one a100: [any GPU, h100] fits as one pod (the scheduler backtracks across
    # the claims); each claim alone on the base state fits too; pinned to the engine's picks,
    # the pod is accepted.
    h100 = 'device.attributes["gpu.example.com"].model == "h100"'
    scen, _ = scenario(0)
    devices = [
        {"name": "dev-0", "attributes": {"model": {"string": "h100"}}},
        {"name": "dev-1", "attributes": {"model": {"string": "a100"}}},
    ]
    scen["slices"] = [
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n0",
                "devices": devices,
            },
        }
    ]
    scen["allocated"] = []
    scen["nodes"] = scen["nodes"][:1]

    def one(name: str, selectors: list[str]) -> dict[str, object]:
        exact = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
        if selectors:
            exact["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        return {
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"devices": {"requests": [{"name": "r0", "exactly": exact}]}},
        }

    scen["claims"] = [one("any", []), one("h100", [h100])]
    scen["pods"] = [[0, 1]]
    row = go_allocator.pairs(scen)[0][0]
    assert row["ok"], row
    assert [a["devices"]["results"][0]["device"] for a in row["allocations"]] == ["dev-1", "dev-0"]
    pinned = pinned_pod(scen, scen["claims"], "n0", row["allocations"])
    assert go_allocator.pairs(pinned)[0][0]["ok"]
    twice = [row["allocations"][1]] * 2  # the h100 for both claims: one device for two
    assert not go_allocator.pairs(pinned_pod(scen, scen["claims"], "n0", twice))[0][0]["ok"]
