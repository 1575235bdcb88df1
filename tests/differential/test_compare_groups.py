"""The engine and kube-scheduler's allocator agree with DRADeviceCompatibilityGroups on.

The harness runs v0.37.2's allocator with the gate on (kube-scheduler then picks its
``experimental`` variant); the engine follows the same gates, and the generator draws
compatibility groups in every shape (one group, disjoint and overlapping groups, groups mixed
with none, two counter sets, grouped devices already allocated, a pod taking several devices).
"""

from __future__ import annotations

import dataclasses

from kubeacc.differential.compare import run_range
from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.engine.release import release

#: seeds [0, CI_GROUP_SEEDS) of the lane
CI_GROUP_SEEDS = 200

SHAPES = {
    "compatibility-group-shapes",
    "compatibility-groups-two-sets",
    "compatibility-groups-allocated",
    "counters",
    "pods",
}


def test_engine_agrees_with_the_allocator_enforcing_groups(
    go_allocator_groups: GoAllocator,
) -> None:
    assert go_allocator_groups.gates == {"DRADeviceCompatibilityGroups": True}
    report = run_range(0, CI_GROUP_SEEDS, go_allocator_groups)
    summary = report.summary()
    assert report.disagreements == [], summary
    assert report.invalid_picks == [], summary
    assert set(report.coverage) >= SHAPES, SHAPES - set(report.coverage)
    assert report.both_allocate > CI_GROUP_SEEDS // 5


def test_the_lane_catches_an_engine_that_ignores_groups(
    go_allocator_groups: GoAllocator,
) -> None:
    # The engine using the grouped slices but not judging their groups: the comparison must
    # report it (disagreements or allocations the scheduler rejects).
    ignoring = dataclasses.replace(
        release("1.37", {"DRADeviceCompatibilityGroups": True}), compatibility_groups=False
    )
    report = run_range(0, 60, go_allocator_groups, engine_release=ignoring)
    assert len(report.disagreements) + len(report.invalid_picks) > 0, report.summary()


def test_shapes_are_drawn_only_for_the_lane() -> None:
    plain, features = scenario(7)
    assert not {"compatibility-group-shapes", "compatibility-groups-two-sets"} & features
    shaped, _ = scenario(7, group_shapes=True)
    assert shaped != plain
    # the other features' draws stay the same seed for seed
    assert [c["metadata"]["name"] for c in shaped["claims"]][: len(plain["claims"])] == [
        c["metadata"]["name"] for c in plain["claims"]
    ]
