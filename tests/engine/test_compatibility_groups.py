"""Slices whose devices list compatibility groups: kube-scheduler v1.37 with the alpha gate
DRADeviceCompatibilityGroups off (its default) ignores them, so their pool is incomplete; v1.36
has no such field and uses them. With the gate on, devices on one counter set go together only
while their groups intersect (a device without groups only with others without)."""

from __future__ import annotations

from typing import Any

from kubeacc.engine.engine import Engine
from kubeacc.engine.release import release
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
    # the reason names the gate (not a scheduler deviation)
    assert p.explanation is not None
    lines = p.explanation.lines()
    assert any("DRADeviceCompatibilityGroups is off" in line for line in lines), lines
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


# -- DRADeviceCompatibilityGroups on: the groups are enforced ------------------------------

GATE_ON = {"DRADeviceCompatibilityGroups": True}


def grouped(groups: list[list[str] | None], total: str = "160Gi") -> list[dict[str, Any]]:
    """A pool with one counter set and a device per entry of ``groups`` (None: no groups)."""
    counters = slice_(
        "a",
        [],
        name="a-counters",
        count=2,
        sharedCounters=[{"name": "cs", "counters": {"mem": {"value": total}}}],
    )
    del counters["spec"]["devices"]
    devs = []
    for i, g in enumerate(groups):
        use: dict[str, Any] = {"counterSet": "cs", "counters": {"mem": {"value": "40Gi"}}}
        if g is not None:
            use["compatibilityGroups"] = g
        devs.append(gpu(f"gpu-{i}", consumesCounters=[use]))
    return [counters, slice_("a", devs, name="a-devices", count=2)]


def gated(slices: list[dict[str, Any]], allocated: list[dict[str, Any]] | None = None) -> Engine:
    return Engine(
        slices, [device_class()], allocated or [], nodes("a"), release=release("1.37", GATE_ON)
    )


def picked(e: Engine, count: int) -> list[str] | None:
    p = e.allocate_pod([claim(exactly(count=count))], commit=False)
    if not p.ok:
        return None
    alloc = p.placements[0].allocation
    assert alloc is not None
    return [r["device"] for r in alloc["devices"]["results"]]


def held(*devices: str) -> dict[str, Any]:
    results = [{"request": "r", "driver": "kubeacc.io", "pool": "a", "device": d} for d in devices]
    return {
        "metadata": {"name": "old", "namespace": "default", "uid": "old"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def test_with_the_gate_on_the_pool_is_used_and_one_group_goes_together() -> None:
    assert picked(gated(grouped([["x"], ["x"], ["x"]])), 3) == ["gpu-0", "gpu-1", "gpu-2"]


def test_devices_of_disjoint_groups_never_share_a_counter_set() -> None:
    e = gated(grouped([["x"], ["y"], ["x"]]))
    # first fit skips gpu-1 (group y) for the second device
    assert picked(e, 2) == ["gpu-0", "gpu-2"]
    assert picked(e, 3) is None
    # the reason names the groups, not a scheduler deviation
    p = e.allocate_pod([claim(exactly(count=3))], commit=False)
    assert p.explanation is not None
    assert any("compatibility groups" in line for line in p.explanation.lines())
    assert not any("deviation" in line for line in p.explanation.lines())
    # the gate off: the pool is ignored altogether (incomplete)
    off = Engine(grouped([["x"], ["y"], ["x"]]), [device_class()], [], nodes("a"))
    assert picked(off, 1) is None


def test_the_intersection_narrows_with_every_device() -> None:
    # x,y then y,z leaves {y}: a device of x alone no longer fits, one of y does
    e = gated(grouped([["x", "y"], ["y", "z"], ["x"], ["y"]]))
    assert picked(e, 3) == ["gpu-0", "gpu-1", "gpu-3"]
    assert picked(e, 4) is None


def test_a_device_without_groups_goes_only_with_others_without() -> None:
    e = gated(grouped([None, ["x"], None]))
    assert picked(e, 2) == ["gpu-0", "gpu-2"]
    assert picked(e, 3) is None
    assert picked(gated(grouped([["x"], None, ["x"]])), 2) == ["gpu-0", "gpu-2"]


def test_allocated_devices_on_the_set_count() -> None:
    devices = grouped([["x"], ["y"], ["y"], None])
    # gpu-0 (x) is held: only x devices may join it; none is left
    assert picked(gated(devices, [held("gpu-0")]), 1) is None
    # gpu-1 (y) is held: gpu-2 (y) may join, gpu-0 (x) and gpu-3 (none) not
    assert picked(gated(devices, [held("gpu-1")]), 1) == ["gpu-2"]
    # held without groups: only devices without groups
    assert picked(gated(devices, [held("gpu-3")]), 1) is None
    assert picked(gated(grouped([None, ["x"], None]), [held("gpu-0")]), 1) == ["gpu-2"]


def test_groups_are_judged_per_counter_set() -> None:
    slices = grouped([["x"], ["y"]])
    slices[0]["spec"]["sharedCounters"].append({"name": "cs2", "counters": {"mem": {"value": "1"}}})
    # on a second set, both in group z: still apart on cs (x vs y)
    for d in slices[1]["spec"]["devices"]:
        d["consumesCounters"].append(
            {"counterSet": "cs2", "counters": {}, "compatibilityGroups": ["z"]}
        )
    assert picked(gated(slices), 2) is None
    for d in slices[1]["spec"]["devices"]:
        d["consumesCounters"][0]["compatibilityGroups"] = ["x"]
    assert picked(gated(slices), 2) == ["gpu-0", "gpu-1"]


def test_counters_still_count_with_groups() -> None:
    # room for two 40Gi devices only, all of one group
    assert picked(gated(grouped([["x"], ["x"], ["x"]], total="80Gi")), 3) is None
    assert picked(gated(grouped([["x"], ["x"], ["x"]], total="80Gi")), 2) == ["gpu-0", "gpu-1"]


def test_nodes_that_differ_only_in_held_groups_are_answered_apart() -> None:
    # Two nodes alike but for which device is held: signatures must tell them apart.
    def pool(node: str) -> list[dict[str, Any]]:
        out = grouped([["x"], ["y"], ["y"]])
        for s in out:
            s["spec"]["nodeName"] = node
            s["spec"]["pool"]["name"] = node
            s["metadata"]["name"] += f"-{node}"
        return out

    old = held("gpu-1")
    old["status"]["allocation"]["devices"]["results"][0]["pool"] = "b"
    other = held("gpu-0")
    other["status"]["allocation"]["devices"]["results"][0]["pool"] = "c"
    e = Engine(
        pool("b") + pool("c"),
        [device_class()],
        [old, other],
        nodes("b", "c"),
        release=release("1.37", GATE_ON),
    )
    on_b = e.allocate_pod([claim(exactly())], node="b", commit=False)
    on_c = e.allocate_pod([claim(exactly())], node="c", commit=False)
    assert on_b.ok and not on_c.ok
