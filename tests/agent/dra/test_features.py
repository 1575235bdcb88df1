"""What the agent publishes where the API server drops DRA fields (dra/features.py)."""

from __future__ import annotations

from kubeacc.agent.dra.features import SliceFeatures, restrict

WHOLE = {"name": "gpu-a", "consumesCounters": [{"counterSet": "a", "counters": {}}]}
PART = {
    "name": "gpu-a-mig-1g",
    "attributes": {"migProfile": {"string": "1g.10gb"}},
    **{"consumesCounters": [{"counterSet": "a", "counters": {}}]},
}
TAINTED = {"name": "gpu-b", "taints": [{"key": "kubeacc.io/unhealthy", "effect": "NoSchedule"}]}
SHARED = {
    "name": "gpu-c",
    "allowMultipleAllocations": True,
    "capacity": {"kubeacc.io/memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}},
}
DEVICES = [WHOLE, PART, TAINTED, SHARED]
SETS = [{"name": "a", "counters": {}}]


def test_everything_kept_changes_nothing() -> None:
    assert restrict(DEVICES, SETS, SliceFeatures()) == (DEVICES, SETS, [])


def test_nothing_is_published_that_the_cluster_would_give_twice() -> None:
    devices, sets, left = restrict(DEVICES, SETS, SliceFeatures(False, False, False))
    assert left == ["gpu-a-mig-1g", "gpu-b"] and sets == []
    assert devices == [
        {"name": "gpu-a"},
        {"name": "gpu-c", "capacity": {"kubeacc.io/memory": {"value": "80Gi"}}},
    ]
    assert SliceFeatures(False, True, False).dropped() == [
        "DRADeviceTaints",
        "DRAConsumableCapacity",
    ]


def test_a_degraded_device_stays_without_its_informational_taint() -> None:
    degraded = {"name": "gpu-d", "taints": [{"key": "kubeacc.io/health", "effect": "None"}]}
    devices, _, left = restrict([degraded, TAINTED], [], SliceFeatures(taints=False))
    assert devices == [{"name": "gpu-d"}] and left == ["gpu-b"]
    assert degraded["taints"]  # the caller's entry is left alone
