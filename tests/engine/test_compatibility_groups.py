"""Slices whose devices list compatibility groups: kube-scheduler v1.37 with the alpha gate
DRADeviceCompatibilityGroups off (its default) ignores them, so their pool is incomplete; v1.36
has no such field and uses them."""

from __future__ import annotations

from typing import Any

from kubeacc.engine.engine import Engine
from tests.engine.helpers import claim, device_class, exactly, gpu, slice_


def nodes(*names: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}} for n in names]


def partitioned(groups: list[str] | None) -> list[dict[str, Any]]:
    """A pool of two slices: the counter set, and two devices drawing on it."""
    counters = slice_(
        "a",
        [],
        name="a-counters",
        count=2,
        sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "80Gi"}}}],
    )
    devs = []
    for i in range(2):
        use: dict[str, Any] = {"counterSet": "cs", "counters": {"mem": {"value": "40Gi"}}}
        if groups and i == 1:
            use["compatibilityGroups"] = groups
        devs.append(gpu(f"gpu-{i}", consumesCounters=[use]))
    del counters["spec"]["devices"]
    return [counters, slice_("a", devs, name="a-devices", count=2)]


def test_a_slice_with_compatibility_groups_makes_its_pool_incomplete_in_137() -> None:
    e = Engine(partitioned(["whole"]), [device_class()], [], nodes("a"))
    p = e.allocate_pod([claim(exactly())])
    # gpu-0 lists no groups, but its slice is ignored with gpu-1's: nothing of the pool.
    assert not p.ok and p.error is None
    every = claim(exactly(allocationMode="All"))
    p = e.allocate_pod([every])
    assert p.error is not None and "incomplete" in p.error


def test_without_groups_or_in_136_the_pool_is_used() -> None:
    assert (
        Engine(partitioned(None), [device_class()], [], nodes("a"))
        .allocate_pod([claim(exactly())])
        .ok
    )
    old = Engine(partitioned(["whole"]), [device_class()], [], nodes("a"), release="1.36")
    assert old.allocate_pod([claim(exactly())]).ok
