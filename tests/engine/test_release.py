"""The engine follows the allocator of the cluster's release: each behaviour that changed."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.engine.engine import Engine
from kubeacc.engine.release import DEFAULT, ReleaseError, parse_gates, release
from tests.engine.helpers import DRIVER, claim, device_class, exactly, gpu, slice_


def test_versions_name_a_release() -> None:
    assert release().name == DEFAULT == "1.37"
    assert release("v1.36.3").name == "1.36"
    assert release("v1.37.2+k3s1").name == "1.37"
    assert release("1.37").name == "1.37"
    with pytest.raises(ReleaseError, match=r"1\.35"):
        release("v1.35.0")
    with pytest.raises(ReleaseError, match=r"choose one of 1\.36, 1\.37"):
        release("latest")


def _counters(node: str, count: int) -> dict[str, Any]:
    s = slice_(
        node,
        [],
        pool=f"pool-{node}",
        count=count,
        name=f"{node}-counters",
        sharedCounters=[{"name": "mem", "counters": {"memory": {"value": "80Gi"}}}],
    )
    del s["spec"]["devices"]
    return s


def _nodes() -> list[dict[str, Any]]:
    return [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}} for n in ("a", "b")]


def _all() -> dict[str, Any]:
    return claim(
        {"name": "all", "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"}}
    )


def test_a_counter_slice_for_another_node_is_gathered_only_by_v136() -> None:
    """Node b's pool is incomplete (one of its two slices is missing): v1.36 gathers b's counter
    slice on node a too, so an ``All`` request on a fails; v1.37 does not see b's pool from a."""
    slices = [
        slice_("a", [gpu("gpu-0")], pool="pool-a"),
        _counters("b", count=2),  # the device slice of pool-b is not published yet
    ]
    classes = [device_class()]
    old = Engine(slices, classes, nodes=_nodes(), release="1.36")
    new = Engine(slices, classes, nodes=_nodes(), release="v1.37.2")
    assert old.allocate_pod([_all()], node="a", commit=False).error is not None
    got = new.allocate_pod([_all()], node="a", commit=False)
    assert got.ok and got.error is None


def test_v137_fetches_a_counter_slice_that_targets_another_node() -> None:
    """A device on node a draws on counters published in a slice for node b: v1.37 fetches
    the pool's other slices and charges the counters."""
    dev = gpu(
        "gpu-0",
        consumesCounters=[{"counterSet": "mem", "counters": {"memory": {"value": "60Gi"}}}],
    )
    dev2 = {**gpu("gpu-1"), "consumesCounters": dev["consumesCounters"]}
    slices = [slice_("a", [dev, dev2], pool="pool-b", count=2, name="a-devs"), _counters("b", 2)]
    e = Engine(slices, [device_class()], nodes=_nodes(), release="1.37")
    assert e.allocate_pod([claim(exactly(count=1))], node="a", commit=False).ok
    # both would take 120Gi of the 80Gi counter set
    assert not e.allocate_pod([claim(exactly(count=2))], node="a", commit=False).ok


def test_all_gathers_by_static_capacity_from_v137() -> None:
    """A shared device whose memory is taken: v1.36 leaves it out of an ``All`` request (the
    other device is allocated); v1.37 keeps it in and the request fails."""
    shared = gpu("gpu-0", allowMultipleAllocations=True)
    other = gpu("gpu-1", allowMultipleAllocations=True)
    used = {
        "metadata": {"name": "old"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": DRIVER,
                            "pool": "a",
                            "device": "gpu-0",
                            "shareID": "11111111-1111-1111-1111-111111111111",
                            "consumedCapacity": {"memory": "70Gi"},
                        }
                    ]
                }
            }
        },
    }
    req = {
        "name": "all",
        "exactly": {
            "deviceClassName": "gpu.kubeacc.io",
            "allocationMode": "All",
            "capacity": {"requests": {"memory": "20Gi"}},
        },
    }
    slices = [slice_("a", [shared, other])]
    for name, fits in (("1.36", True), ("1.37", False)):
        e = Engine(slices, [device_class()], [used], nodes=_nodes()[:1], release=name)
        got = e.allocate_pod([claim(req)], node="a", commit=False)
        assert got.ok is fits, name


def test_distinct_attribute_compares_every_device_from_v137() -> None:
    """Three devices for one ``All`` request under ``distinctAttribute`` on index 0, 1, 0:
    v1.36 remembers one value per request (the second replaces the first, so the third
    passes); v1.37 compares with every device added and fails the request."""
    devs = [gpu(f"gpu-{i}") for i in range(3)]
    for d, i in zip(devs, (0, 1, 0), strict=True):
        d["attributes"]["index"] = {"int": i}
    req = {"name": "all", "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"}}
    c = claim(req, constraints=[{"distinctAttribute": f"{DRIVER}/index"}])
    slices = [slice_("a", devs)]
    old = Engine(slices, [device_class()], nodes=_nodes()[:1], release="1.36")
    assert old.allocate_pod([c], node="a", commit=False).ok
    new = Engine(slices, [device_class()], nodes=_nodes()[:1], release="1.37")
    got = new.allocate_pod([c], node="a", commit=False)
    assert not got.ok and got.error is not None and "constraint" in got.error


def test_a_config_for_every_request_is_written_without_requests_from_v137() -> None:
    opaque = {"opaque": {"driver": DRIVER, "parameters": {"mode": "x"}}}
    c = claim(
        exactly("one"),
        {"name": "two", "firstAvailable": [{"name": "s", "deviceClassName": "gpu.kubeacc.io"}]},
        config=[{"requests": ["one", "two/s"], **opaque}, {"requests": ["one"], **opaque}],
    )
    classes = [device_class(config=[opaque])]
    slices = [slice_("a", [gpu("gpu-0"), gpu("gpu-1")])]
    got = {}
    for name in ("1.36", "1.37"):
        e = Engine(slices, classes, nodes=_nodes()[:1], release=name)
        p = e.allocate_pod([c], node="a", commit=False).placements[0]
        assert p.allocation is not None
        got[name] = [(x["source"], x.get("requests")) for x in p.allocation["devices"]["config"]]
    assert got["1.36"] == [
        ("FromClass", ["one", "two/s"]),
        ("FromClaim", ["one", "two/s"]),
        ("FromClaim", ["one"]),
    ]
    assert got["1.37"] == [("FromClass", None), ("FromClaim", None), ("FromClaim", ["one"])]


def test_counters_being_taken_are_kept_per_driver_from_v137() -> None:
    """Two drivers each publish a pool named ``p`` with a 20Gi counter set ``cs`` and a
    device drawing all of it; a claim takes one device of each: v1.36 tallies both against
    one pool name and refuses, v1.37 keeps the drivers apart."""
    slices = []
    for driver in (DRIVER, "other.example.com"):
        dev = gpu(
            f"{driver}-0",
            consumesCounters=[{"counterSet": "cs", "counters": {"mem": {"value": "20Gi"}}}],
        )
        devs = slice_("a", [dev], pool="p", count=2, name=f"{driver}-devs")
        counters = slice_(
            "a",
            [],
            pool="p",
            count=2,
            name=f"{driver}-counters",
            sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "20Gi"}}}],
        )
        del counters["spec"]["devices"]
        for s in (devs, counters):
            s["spec"]["driver"] = driver
        slices += [devs, counters]
    classes = [
        device_class("one", sel=f'device.driver == "{DRIVER}"'),
        device_class("two", sel='device.driver == "other.example.com"'),
    ]
    c = claim(exactly("a", cls="one"), exactly("b", cls="two"))
    for name, fits in (("1.36", False), ("1.37", True)):
        e = Engine(slices, classes, nodes=_nodes()[:1], release=name)
        assert e.allocate_pod([c], node="a", commit=False).ok is fits, name


def test_gates_turn_compatibility_groups_on_for_137_only() -> None:
    plain = release("1.37")
    assert not plain.compatibility_groups and plain.compatibility_group_slices_ignored
    on = release("v1.37.2", {"DRADeviceCompatibilityGroups": True})
    assert on.compatibility_groups and not on.compatibility_group_slices_ignored
    assert on.gates == (("DRADeviceCompatibilityGroups", True),)
    assert release(on) is on  # a Release passes through
    off = release(on, {"DRADeviceCompatibilityGroups": False})
    assert not off.compatibility_groups and off.compatibility_group_slices_ignored
    with pytest.raises(ReleaseError, match=r"does not exist in Kubernetes 1\.36"):
        release("1.36", {"DRADeviceCompatibilityGroups": True})
    with pytest.raises(ReleaseError, match=r"DRAFancy.*known: DRADeviceCompatibilityGroups"):
        release("1.37", {"DRAFancy": True})


def test_gates_parse_as_kube_scheduler_writes_them() -> None:
    assert parse_gates("DRADeviceCompatibilityGroups=true, X=False") == {
        "DRADeviceCompatibilityGroups": True,
        "X": False,
    }
    assert parse_gates("") == {}
    for bad in ("DRADeviceCompatibilityGroups", "A=yes", "=true"):
        with pytest.raises(ReleaseError, match="NAME=true or NAME=false"):
            parse_gates(bad)
