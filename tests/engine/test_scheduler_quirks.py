"""kube-scheduler's allocator rules the differential corpus found, one test per rule.

Each case was a disagreement between the engine and k8s.io/dynamic-resource-allocation v0.36.3
(tests/differential); the expected verdict is the scheduler's.
"""

from __future__ import annotations

from typing import Any

from kubeacc.engine.engine import Engine
from tests.engine.helpers import DRIVER, claim, device_class, devices_of, exactly, gpu, slice_


def eng(*slices: dict[str, Any], allocated: list[dict[str, Any]] | None = None) -> Engine:
    return Engine(list(slices), [device_class()], allocated or [])


def test_older_generation_is_used_when_the_newest_targets_another_node() -> None:
    new = slice_("b", [gpu("new")], pool="p", generation=2, name="new")
    old = slice_("a", [gpu("old")], pool="p", generation=1, name="old")
    p = eng(new, old).allocate(claim(exactly()), node="a")
    assert p.ok and devices_of(p.allocation or {}) == ["old"]


def test_constraint_values_keep_their_type_bool_is_not_int() -> None:
    a = gpu("a", flag={"bool": True})
    b = gpu("b", flag={"int": 1})
    a["attributes"]["flag"] = {"bool": True}
    b["attributes"]["flag"] = {"int": 1}
    c = claim(exactly(count=2), constraints=[{"matchAttribute": f"{DRIVER}/flag"}])
    assert not eng(slice_("n", [a, b])).allocate(c).ok


def test_versions_compare_as_written_build_metadata_included() -> None:
    a, b = gpu("a", version="1.2.3"), gpu("b", version="1.2.3+build.5")
    c = claim(exactly(count=2), constraints=[{"matchAttribute": f"{DRIVER}/driverVersion"}])
    assert not eng(slice_("n", [a, b])).allocate(c).ok
    same = claim(exactly(count=2), constraints=[{"matchAttribute": f"{DRIVER}/driverVersion"}])
    assert eng(slice_("n", [a, gpu("c", version="1.2.3")])).allocate(same).ok


def test_all_over_32_devices_is_refused() -> None:
    devs = [gpu(f"g{i}") for i in range(33)]
    all_ = {
        "name": "gpus",
        "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"},
    }
    p = eng(slice_("n", devs)).allocate(claim(all_))
    assert not p.ok and "limit of 32" in str(p.explanation)
    assert eng(slice_("n", devs[:32])).allocate(claim(all_)).ok


def test_a_pool_with_duplicate_device_names_is_not_used() -> None:
    p = eng(slice_("n", [gpu("g0"), gpu("g0")])).allocate(claim(exactly()))
    assert not p.ok and "duplicate device name g0" in str(p.explanation)


def test_constraint_listing_one_subrequest_does_not_bind_its_siblings() -> None:
    first = {
        "name": "r0",
        "firstAvailable": [
            {"name": "s0", "deviceClassName": "gpu.kubeacc.io", "count": 2},
            {"name": "s1", "deviceClassName": "gpu.kubeacc.io", "count": 1},
        ],
    }
    c = claim(first, constraints=[{"requests": ["r0/s1"], "matchAttribute": f"{DRIVER}/model"}])
    p = eng(slice_("n", [gpu("a", model="x"), gpu("b", model="y")])).allocate(c)
    assert p.ok and {r["request"] for r in (p.allocation or {})["devices"]["results"]} == {"r0/s0"}


def test_cel_bind() -> None:
    sel = f'cel.bind(a, device.attributes["{DRIVER}"], a.model == "x" && a.numaNode == 0)'
    e = eng(slice_("n", [gpu("a", model="y"), gpu("b", model="x")]))
    p = e.allocate(claim(exactly(selectors=[sel])))
    assert p.ok and devices_of(p.allocation or {}) == ["b"]


def test_an_indexed_domain_does_not_leak_into_other_expressions() -> None:
    e = eng(slice_("n", [gpu("a")]))
    probe = claim(exactly(selectors=['size(device.attributes["d.example.com"]) == 0']))
    assert e.allocate(probe, commit=False).ok
    assert not e.allocate(claim(exactly(selectors=['"d.example.com" in device.attributes']))).ok


def test_selector_errors_on_devices_in_use_are_never_seen() -> None:
    broken = gpu("a")
    del broken["attributes"]["model"]
    ok = gpu("b")
    taken = {
        "metadata": {"name": "old"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "r", "driver": DRIVER, "pool": "n", "device": "a"}]
                }
            }
        },
    }
    sel = f'device.attributes["{DRIVER}"].model == "h100"'
    e = eng(slice_("n", [broken, ok]), allocated=[taken])
    p = e.allocate(claim(exactly(selectors=[sel])))
    assert p.ok and devices_of(p.allocation or {}) == ["b"]
    fresh = eng(slice_("n", [broken, ok])).allocate(claim(exactly(selectors=[sel])))
    assert not fresh.ok and "CEL runtime error" in str(fresh.explanation)


def test_consumed_capacity_of_existing_shares_counts() -> None:
    shared = gpu(
        "s",
        memory="20Gi",
        allowMultipleAllocations=True,
    )
    share = {
        "request": "r",
        "driver": DRIVER,
        "pool": "n",
        "device": "s",
        "shareID": "00000000-0000-0000-0000-000000000001",
        "consumedCapacity": {"memory": "16Gi"},
    }
    old = {"metadata": {"name": "old"}, "status": {"allocation": {"devices": {"results": [share]}}}}
    want = exactly(capacity={"requests": {"memory": "8Gi"}})
    assert not eng(slice_("n", [shared]), allocated=[old]).allocate(claim(want)).ok
    small = exactly(capacity={"requests": {"memory": "4Gi"}})
    assert eng(slice_("n", [shared]), allocated=[old]).allocate(claim(small)).ok


def test_equal_nodes_share_answers_but_keep_their_own_devices() -> None:
    e = eng(slice_("a", [gpu("g0"), gpu("g1")]), slice_("b", [gpu("g0"), gpu("g1")]))
    first = e.allocate(claim(exactly(), name="one"), node="a")
    second = e.allocate(claim(exactly(), name="two"), node="b")
    assert first.node == "a" and second.node == "b"
    assert [r["pool"] for r in (second.allocation or {})["devices"]["results"]] == ["b"]
    third = e.allocate(claim(exactly(), name="three"), node="a")
    assert devices_of(third.allocation or {}) == ["g1"]  # g0 is taken now
