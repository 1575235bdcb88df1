"""Allocator semantics, one test per rule."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.engine.engine import Engine
from tests.engine.helpers import (
    DRIVER,
    allocated,
    claim,
    device_class,
    devices_of,
    exactly,
    gpu,
    node_gpus,
    slice_,
)

ROOT = "resource.kubernetes.io/pcieRoot"


def eng(
    *slices: dict[str, Any],
    allocated_claims: list[dict[str, Any]] | None = None,
    classes: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> Engine:
    return Engine(list(slices), classes or [device_class()], allocated_claims or [], **kw)


def test_exact_count_and_result_shape() -> None:
    e = eng(slice_("a", node_gpus(4)))
    p = e.allocate(claim(exactly(count=2)))
    assert p.ok and p.node == "a"
    assert p.allocation is not None
    r = p.allocation["devices"]["results"][0]
    assert set(r) == {"request", "driver", "pool", "device"}
    assert r["driver"] == DRIVER and r["pool"] == "a"
    sel = p.allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert sel == {"key": "metadata.name", "operator": "In", "values": ["a"]}


def test_devices_are_not_allocated_twice() -> None:
    e = eng(slice_("a", node_gpus(4)))
    got = [devices_of(e.allocate(claim(exactly(count=2))).allocation or {}) for _ in range(2)]
    assert not set(got[0]) & set(got[1])
    p = e.allocate(claim(exactly(count=1)))
    assert not p.ok and p.explanation is not None
    assert "0 free, need 1" in str(p.explanation)


def test_only_newest_generation_counts() -> None:
    old = slice_("a", [gpu("old-0"), gpu("old-1")], generation=1)
    new = slice_("a", [gpu("new-0")], generation=2)
    e = eng(old, new)
    p = e.allocate(claim(exactly(count=1)))
    assert devices_of(p.allocation or {}) == ["new-0"]
    assert not e.allocate(claim(exactly(count=1))).ok


def test_incomplete_pool_is_ignored_and_blocks_all_mode() -> None:
    part = slice_(None, [gpu("g0")], pool="big", count=2, allNodes=True)
    local = slice_("a", [gpu("l0")])
    e = eng(part, local)
    assert devices_of(e.allocate(claim(exactly(count=1)), commit=False).allocation or {}) == ["l0"]
    p = e.allocate(
        claim(
            {
                "name": "all",
                "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"},
            }
        )
    )
    assert not p.ok and "incomplete" in str(p.explanation)


def test_all_mode_takes_every_match_and_needs_them_free() -> None:
    e = eng(slice_("a", node_gpus(3)))
    all_req = {
        "name": "all",
        "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"},
    }
    p = e.allocate(claim(all_req), commit=False)
    assert sorted(devices_of(p.allocation or {})) == ["gpu-0", "gpu-1", "gpu-2"]
    e.allocate(claim(exactly(count=1)))
    p = e.allocate(claim(all_req))
    assert not p.ok and "allocationMode All" in str(p.explanation)


def test_all_mode_needs_at_least_one_device() -> None:
    e = eng(slice_("a", node_gpus(2)))
    req = {
        "name": "all",
        "exactly": {
            "deviceClassName": "gpu.kubeacc.io",
            "allocationMode": "All",
            "selectors": [{"cel": {"expression": "false"}}],
        },
    }
    assert not e.allocate(claim(req)).ok


def test_first_available_takes_subrequests_in_order() -> None:
    e = eng(slice_("a", [*node_gpus(2, model="a100"), gpu("big", model="h200")]))
    fa = {
        "name": "gpus",
        "firstAvailable": [
            {
                "name": "h200",
                "deviceClassName": "gpu.kubeacc.io",
                "count": 1,
                "selectors": [
                    {"cel": {"expression": 'device.attributes["kubeacc.io"].model == "h200"'}}
                ],
            },
            {"name": "any2", "deviceClassName": "gpu.kubeacc.io", "count": 2},
        ],
    }
    p1 = e.allocate(claim(fa))
    assert p1.allocation is not None
    assert p1.allocation["devices"]["results"][0]["request"] == "gpus/h200"
    p2 = e.allocate(claim(fa))
    assert p2.allocation is not None
    assert {r["request"] for r in p2.allocation["devices"]["results"]} == {"gpus/any2"}
    p3 = e.allocate(claim(fa))
    assert not p3.ok and "no subrequest fits" in str(p3.explanation)


def test_all_mode_that_breaks_a_constraint_fails_the_claim_like_the_scheduler() -> None:
    # Devices on two PCIe roots: "All" can't satisfy matchAttribute on the root, and upstream
    # treats that as an error for the claim rather than trying the next subrequest.
    e = eng(slice_("a", node_gpus(4, per_root=2)))
    fa = {
        "name": "gpus",
        "firstAvailable": [
            {"name": "every", "deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"},
            {"name": "one", "deviceClassName": "gpu.kubeacc.io", "count": 1},
        ],
    }
    c = claim(fa)
    c["spec"]["devices"]["constraints"] = [{"matchAttribute": ROOT}]
    placed = e.allocate(c)
    assert not placed.ok
    assert "because a claim constraint would not be satisfied" in str(placed.explanation)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('device.capacity["kubeacc.io"].memory.isGreaterThan(quantity("40Gi"))', ["gpu-1"]),
        ('device.capacity["kubeacc.io"].memory.compareTo(quantity("40Gi")) <= 0', ["gpu-0"]),
        ('device.capacity["kubeacc.io"].memory == quantity("81920Mi")', ["gpu-1"]),
        (
            'device.attributes["kubeacc.io"].driverVersion.isGreaterThan(semver("550.0.0"))',
            ["gpu-1"],
        ),
        ('device.attributes["kubeacc.io"].driverVersion.major() == 535', ["gpu-0"]),
        ('device.attributes["kubeacc.io"].model.startsWith("a")', ["gpu-0"]),
        (
            'device.attributes["other.example.com"].size() == 0 && '
            'device.attributes["kubeacc.io"].numaNode == 1',
            ["gpu-1"],
        ),
    ],
)
def test_cel_selectors_with_quantity_and_semver(expr: str, expected: list[str]) -> None:
    devs = [
        gpu("gpu-0", model="a10", memory="24Gi", version="535.1.0"),
        gpu("gpu-1", numa=1, model="h100", memory="80Gi", version="550.54.15"),
    ]
    e = eng(slice_("a", devs))
    p = e.allocate(claim(exactly(count=1, selectors=[expr])))
    assert devices_of(p.allocation or {}) == expected


def test_cel_runtime_error_aborts_with_reason() -> None:
    e = eng(slice_("a", node_gpus(2)))
    p = e.allocate(claim(exactly(selectors=['device.attributes["kubeacc.io"].nope == 1'])))
    assert not p.ok and "CEL runtime error" in str(p.explanation)


def test_match_attribute_across_requests() -> None:
    e = eng(slice_("a", node_gpus(8)))
    c = claim(
        exactly("x", 1),
        exactly("y", 1),
        constraints=[{"requests": ["x", "y"], "matchAttribute": ROOT}],
    )
    p = e.allocate(c)
    assert p.ok and p.allocation is not None
    roots = {r["device"] for r in p.allocation["devices"]["results"]}
    assert roots in ({"gpu-0", "gpu-1"}, {"gpu-2", "gpu-3"}, {"gpu-4", "gpu-5"}, {"gpu-6", "gpu-7"})


def test_match_attribute_without_common_value_is_explained() -> None:
    e = eng(slice_("a", node_gpus(8)))
    p = e.allocate(claim(exactly(count=3), constraints=[{"matchAttribute": ROOT}]))
    assert not p.ok
    assert "matchAttribute resource.kubernetes.io/pcieRoot: no common value" in str(p.explanation)


def test_distinct_attribute() -> None:
    e = eng(slice_("a", node_gpus(8)))
    p = e.allocate(claim(exactly(count=4), constraints=[{"distinctAttribute": ROOT}]))
    assert p.ok and p.allocation is not None
    assert len(devices_of(p.allocation)) == 4


def test_topology_preference_keeps_sets_together() -> None:
    e = eng(slice_("a", node_gpus(8)))
    p = e.allocate(claim(exactly(count=4)))
    got = sorted(devices_of(p.allocation or {}))
    assert got in (["gpu-0", "gpu-1", "gpu-2", "gpu-3"], ["gpu-4", "gpu-5", "gpu-6", "gpu-7"])


def test_shared_counters_are_consumed() -> None:
    parts = [
        gpu(
            f"mig-{i}",
            consumesCounters=[
                {"counterSet": "gpu-0-mem", "counters": {"memory": {"value": "40Gi"}}}
            ],
        )
        for i in range(3)
    ]
    # v1: a slice carries devices or shared counters, never both.
    s = slice_("a", parts, count=2)
    counters = slice_(
        "a",
        [],
        count=2,
        name="a-counters",
        sharedCounters=[{"name": "gpu-0-mem", "counters": {"memory": {"value": "80Gi"}}}],
    )
    del counters["spec"]["devices"]
    e = eng(s, counters)
    assert e.allocate(claim(exactly(count=2))).ok
    p = e.allocate(claim(exactly(count=1)))
    assert not p.ok and "shared counter gpu-0-mem/memory exhausted" in str(p.explanation)


def test_consumable_capacity_shares_a_device() -> None:
    dev = gpu(
        "shared",
        allowMultipleAllocations=True,
        capacity={
            "memory": {
                "value": "80Gi",
                "requestPolicy": {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}},
            }
        },
    )
    e = eng(slice_("a", [dev]))
    req = exactly(count=1, capacity={"requests": {"memory": "35Gi"}})
    p = e.allocate(claim(req))
    assert p.allocation is not None
    r = p.allocation["devices"]["results"][0]
    # The result names the capacity as the slice wrote it, not its qualified form.
    assert r["consumedCapacity"] == {"memory": "40Gi"} and r["shareID"]
    assert e.allocate(claim(req)).ok  # 80Gi total: two 40Gi shares
    assert not e.allocate(claim(req)).ok


def test_capacity_names_are_looked_up_as_written() -> None:
    """kube-scheduler finds a requested capacity by its literal name: ``kubeacc.io/memory``
    is not the capacity a slice wrote as ``memory`` (and the other way round), although CEL
    reaches both as ``device.capacity["kubeacc.io"].memory``."""
    short = gpu("short", allowMultipleAllocations=True)
    long_ = gpu(
        "long", allowMultipleAllocations=True, capacity={"kubeacc.io/memory": {"value": "80Gi"}}
    )
    for dev, fits, misses in (
        (short, "memory", "kubeacc.io/memory"),
        (long_, "kubeacc.io/memory", "memory"),
    ):
        e = eng(slice_("a", [dev]))
        assert not e.allocate(claim(exactly(capacity={"requests": {misses: "1Gi"}}))).ok
        p = e.allocate(claim(exactly(capacity={"requests": {fits: "1Gi"}})))
        assert p.allocation is not None
        assert p.allocation["devices"]["results"][0]["consumedCapacity"] == {fits: "1Gi"}
        assert not e.allocate(claim(exactly(capacity={"requests": {misses: "1Gi"}}))).ok


def test_an_allocated_share_counts_under_the_name_it_was_given() -> None:
    dev = gpu("shared", allowMultipleAllocations=True, capacity={"memory": {"value": "80Gi"}})
    held = allocated("a", "shared")
    held["status"]["allocation"]["devices"]["results"][0].update(
        shareID="0b3e1c52-9d7a-4d57-8a2f-1f4f2d1c0a11", consumedCapacity={"memory": "60Gi"}
    )
    e = eng(slice_("a", [dev]), allocated_claims=[held])
    assert not e.allocate(claim(exactly(capacity={"requests": {"memory": "30Gi"}}))).ok
    assert e.allocate(claim(exactly(capacity={"requests": {"memory": "20Gi"}}))).ok


def test_the_explanation_names_the_capacity_that_ran_out() -> None:
    policy = {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}
    dev = gpu(
        "shared",
        allowMultipleAllocations=True,
        capacity={
            "kubeacc.io/memory": {"value": "80Gi"},
            "kubeacc.io/cores": {"value": "100", "requestPolicy": policy},
        },
    )
    e = eng(slice_("a", [dev]))
    share = {"kubeacc.io/cores": "20", "kubeacc.io/memory": "30Gi"}
    req = exactly(count=1, capacity={"requests": share})
    assert e.allocate(claim(req)).ok and e.allocate(claim(req)).ok
    p = e.allocate(claim(req))  # 20 Gi left, 60 cores left
    assert p.explanation is not None
    why = str(p.explanation.to_dict())
    assert "1 with kubeacc.io/cores >= 20, 0 with kubeacc.io/memory >= 30Gi" in why
    # A share naming only cores takes the memory it did not name (all of it: no policy).
    only_cores = exactly(count=1, capacity={"requests": {"kubeacc.io/cores": "10"}})
    q = e.allocate(claim(only_cores))
    assert q.explanation is not None
    assert "1 with kubeacc.io/cores >= 10, 0 with room for the default capacities" in str(
        q.explanation.to_dict()
    )


def test_capacity_request_filters_unshared_devices() -> None:
    e = eng(slice_("a", [gpu("small", memory="24Gi"), gpu("big", memory="80Gi")]))
    p = e.allocate(claim(exactly(capacity={"requests": {"memory": "40Gi"}})))
    assert devices_of(p.allocation or {}) == ["big"]


def test_admin_access_reuses_allocated_devices() -> None:
    e = eng(slice_("a", node_gpus(2)), allocated_claims=[allocated("a", "gpu-0", "gpu-1")])
    assert not e.allocate(claim(exactly(count=1))).ok
    p = e.allocate(claim(exactly(count=2, adminAccess=True)))
    assert p.allocation is not None
    assert all(r["adminAccess"] for r in p.allocation["devices"]["results"])


def test_existing_allocations_take_devices() -> None:
    e = eng(slice_("a", node_gpus(4)), allocated_claims=[allocated("a", "gpu-0", "gpu-1")])
    p = e.allocate(claim(exactly(count=2)))
    assert sorted(devices_of(p.allocation or {})) == ["gpu-2", "gpu-3"]


def test_admin_allocations_do_not_take_devices() -> None:
    e = eng(slice_("a", node_gpus(1)), allocated_claims=[allocated("a", "gpu-0", admin=True)])
    assert e.allocate(claim(exactly(count=1))).ok


def test_node_selector_and_all_nodes_slices() -> None:
    nodes = [
        {"metadata": {"name": "a", "labels": {"zone": "z1"}}},
        {"metadata": {"name": "b", "labels": {"zone": "z2"}}},
    ]
    sel = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}
        ]
    }
    e = Engine(
        [slice_(None, [gpu("net-0")], pool="rack", nodeSelector=sel)], [device_class()], [], nodes
    )
    p = e.allocate(claim(exactly()))
    assert p.node == "b" and p.allocation is not None
    assert p.allocation["nodeSelector"] == sel
    e2 = Engine(
        [slice_(None, [gpu("fabric-0")], pool="fab", allNodes=True)], [device_class()], [], nodes
    )
    p2 = e2.allocate(claim(exactly()))
    assert p2.ok and p2.allocation is not None and "nodeSelector" not in p2.allocation


def test_class_and_claim_config_in_result() -> None:
    cls = device_class(config=[{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}])
    e = eng(slice_("a", node_gpus(2)), classes=[cls])
    c = claim(
        exactly(),
        config=[{"requests": ["gpus"], "opaque": {"driver": DRIVER, "parameters": {"b": 2}}}],
    )
    p = e.allocate(c)
    assert p.allocation is not None
    cfg = p.allocation["devices"]["config"]
    # the claim's only request: kube-scheduler 1.37 writes it as "every request" (no list)
    assert cfg[0]["source"] == "FromClass" and "requests" not in cfg[0]
    assert cfg[1]["source"] == "FromClaim" and cfg[1]["opaque"]["parameters"] == {"b": 2}


def test_taints_need_tolerations() -> None:
    tainted = gpu("t0", taints=[{"key": "broken", "value": "ecc", "effect": "NoSchedule"}])
    e = eng(slice_("a", [tainted]))
    assert not e.allocate(claim(exactly())).ok
    tol = [{"key": "broken", "operator": "Exists"}]
    assert e.allocate(claim(exactly(tolerations=tol))).ok


def test_missing_class_and_bad_claims_are_explained() -> None:
    e = eng(slice_("a", node_gpus(1)))
    p = e.allocate(claim(exactly(cls="nope.kubeacc.io")))
    assert "device class nope.kubeacc.io not found" in str(p.explanation)
    bad = claim(
        {"name": "x", "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "Some"}}
    )
    assert "unknown allocationMode" in str(e.allocate(bad).explanation)


def test_explanations_aggregate_over_many_nodes_quickly() -> None:
    slices = [slice_(f"n{i:03d}", node_gpus(8)) for i in range(200)]
    e = eng(*slices)
    p = e.allocate(claim(exactly(count=9)))
    assert not p.ok and p.explanation is not None
    lines = p.explanation.lines()
    assert len(lines) == 1 and "(+197 more)" in lines[0] and "need 9" in lines[0]
    assert p.seconds < 1.0


def test_search_limit_is_reported() -> None:
    # Three distinct NUMA nodes among devices on two: only exhaustive search can tell.
    e = eng(slice_("a", node_gpus(16, per_numa=8)), step_limit=50)
    p = e.allocate(
        claim(exactly(count=3), constraints=[{"distinctAttribute": "kubeacc.io/numaNode"}])
    )
    assert not p.ok and "search stopped after 50 steps" in str(p.explanation)
    assert "already used" in str(p.explanation)
    e2 = eng(slice_("a", node_gpus(16, per_numa=8)))
    p2 = e2.allocate(
        claim(exactly(count=3), constraints=[{"distinctAttribute": "kubeacc.io/numaNode"}])
    )
    assert not p2.ok and "distinctAttribute kubeacc.io/numaNode: value" in str(p2.explanation)


def test_selector_verdicts_are_shared_across_nodes_but_errors_are_not() -> None:
    # Equal devices on two nodes: the second node reuses the first one's verdicts, and a
    # device whose selector fails is evaluated (and named) again every time.
    e = eng(slice_("a", node_gpus(2)), slice_("b", node_gpus(2)))
    fits = claim(exactly(count=2, selectors=['device.attributes["kubeacc.io"].model == "h100"']))
    placed = [e.allocate(fits, node=n, commit=False) for n in ("a", "b")]
    assert [p.ok for p in placed] == [True, True]
    assert devices_of(placed[1].allocation or {}) == ["gpu-0", "gpu-1"]
    bad = claim(exactly(selectors=['device.attributes["kubeacc.io"].nope == 1']))
    for node in ("a", "b", "a"):
        p = e.allocate(bad, node=node, commit=False)
        assert not p.ok and "CEL runtime error" in str(p.explanation), node
