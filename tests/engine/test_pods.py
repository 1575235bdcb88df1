"""A pod's claims allocated together, the errors that fail a pod, and the pool order with binding
conditions: kube-scheduler's allocator semantics (k8s.io/dynamic-resource-allocation/structured
v0.36), one test per rule."""

from __future__ import annotations

from typing import Any

from kubeacc.engine.engine import Engine
from tests.engine.helpers import allocated, claim, device_class, devices_of, exactly, gpu, slice_

H100 = 'device.attributes["kubeacc.io"].model == "h100"'


def nodes(*names: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}} for n in names]


def h100_a100(node: str = "a") -> dict[str, Any]:
    # The h100 first: a claim-by-claim first fit gives it to the claim that takes any GPU.
    return slice_(node, [gpu("gpu-0", model="h100"), gpu("gpu-1", model="a100")])


def test_a_pods_claims_fit_together_where_claim_by_claim_fails() -> None:
    pod = [claim(exactly(), name="any"), claim(exactly(selectors=[H100]), name="h100")]
    # Claim by claim: the first claim may take the h100, and then the second cannot fit.
    one_by_one = Engine([h100_a100()], [device_class()], [])
    first = one_by_one.allocate(pod[0])
    assert first.ok
    assert first.allocation is not None and devices_of(first.allocation) == ["gpu-0"]
    assert not one_by_one.allocate(pod[1]).ok
    # Together, like kube-scheduler: the search goes back into the first claim.
    e = Engine([h100_a100()], [device_class()], [])
    p = e.allocate_pod(pod, pod="default/p")
    assert p.ok and p.node == "a" and p.error is None
    got = {pl.claim: devices_of(pl.allocation or {}) for pl in p.placements}
    assert got == {"default/any": ["gpu-1"], "default/h100": ["gpu-0"]}
    assert all(pl.pod == "default/p" for pl in p.placements)
    # Committed: both devices are taken now.
    assert not e.allocate(claim(exactly(), name="later")).ok


def test_a_pod_that_does_not_fit_together_is_placed_nowhere() -> None:
    e = Engine([h100_a100()], [device_class()], [])
    pod = [claim(exactly(selectors=[H100]), name="x"), claim(exactly(selectors=[H100]), name="y")]
    p = e.allocate_pod(pod)
    assert not p.ok and p.error is None and p.node is None
    assert all(not pl.ok for pl in p.placements)
    assert p.explanation is not None and "do not fit together" in str(p.explanation)
    # Nothing was taken by the half that fitted.
    assert e.allocate(pod[0]).ok


def test_one_claim_pod_is_allocate() -> None:
    e = Engine([h100_a100()], [device_class()], [])
    p = e.allocate_pod([claim(exactly(count=2))], pod="p")
    assert p.ok and len(p.placements) == 1 and p.placements[0].pod == "p"
    assert sorted(devices_of(p.placements[0].allocation or {})) == ["gpu-0", "gpu-1"]


def test_admin_access_of_another_claim_of_the_pod_may_share_a_device() -> None:
    # A device one claim takes is off limits to the others, except to admin access, which is
    # only kept off devices its own claim takes.
    e = Engine([slice_("a", [gpu("gpu-0")])], [device_class()], [])
    pod = [claim(exactly(), name="user"), claim(exactly(adminAccess=True), name="admin")]
    p = e.allocate_pod(pod)
    assert p.ok and [devices_of(pl.allocation or {}) for pl in p.placements] == [["gpu-0"]] * 2
    both_users = [claim(exactly(), name="u1"), claim(exactly(), name="u2")]
    assert not e.allocate_pod(both_users, commit=False).ok


MISSING_KEY = 'device.attributes["kubeacc.io"].extra == 1'


def _with_extra(s: dict[str, Any]) -> dict[str, Any]:
    for d in s["spec"]["devices"]:
        if d.pop("extra_attr", False):
            d["attributes"]["extra"] = {"int": 1}
    return s


def test_a_cel_runtime_error_on_a_node_fails_the_pod_not_only_the_node() -> None:
    # Node a's devices lack the attribute (a CEL runtime error there); node b's have it.
    slices = [
        _with_extra(slice_("a", [gpu("gpu-0"), gpu("gpu-1")])),
        _with_extra(slice_("b", [gpu("gpu-0", extra_attr=True), gpu("gpu-1", extra_attr=True)])),
    ]
    e = Engine(slices, [device_class()], [], nodes("a", "b"))
    p = e.allocate(claim(exactly(selectors=[MISSING_KEY])))
    # Node b could take it, but the scheduler's Filter on node a returned an error status.
    assert not p.ok and p.node is None
    assert p.error is not None and "node a" in p.error and "CEL runtime error" in p.error
    assert "retried with backoff, not placed on another node" in str(p.explanation)
    assert p.to_dict()["error"] == p.error
    # The same for a pod of two claims, where only the second one's selector fails.
    pod = [claim(exactly(), name="fine"), claim(exactly(selectors=[MISSING_KEY]), name="bad")]
    pp = Engine(slices, [device_class()], [], nodes("a", "b")).allocate_pod(pod, pod="p")
    assert not pp.ok and pp.error is not None and "CEL runtime error" in pp.error
    assert all(pl.error == pp.error and not pl.ok for pl in pp.placements)
    # A device in use is skipped before its selectors run: no error where none is evaluated.
    taken = Engine(slices, [device_class()], [allocated("a", "gpu-1")], nodes("a", "b"))
    quiet = taken.allocate_pod(pod)
    assert quiet.ok and quiet.node == "b" and quiet.error is None
    # A search that stops at enough feasible nodes before reaching node a never sees it.
    first_b = Engine(slices, [device_class()], [], nodes("b", "a"), max_feasible_nodes=1)
    ok = first_b.allocate(claim(exactly(selectors=[MISSING_KEY])))
    assert ok.ok and ok.node == "b" and ok.error is None


def test_an_invalid_pool_only_rules_out_its_node() -> None:
    dup = slice_("a", [gpu("gpu-0"), gpu("gpu-0")])
    b = slice_("b", [gpu("gpu-0"), gpu("gpu-1")])
    e = Engine([dup, b], [device_class()], [], nodes("a", "b"))
    p = e.allocate_pod([claim(exactly(), name="x"), claim(exactly(), name="y")], commit=False)
    assert p.ok and p.node == "b" and p.error is None
    one = e.allocate(claim(exactly()))
    assert one.ok and one.node == "b" and one.error is None
    assert one.explanation is None


def bound(name: str) -> dict[str, Any]:
    return gpu(
        name,
        bindingConditions=["example.com/attached"],
        bindingFailureConditions=["example.com/failed"],
    )


def test_pools_with_binding_conditions_are_searched_last() -> None:
    # Pool "aa" sorts first by name, but one of its devices has binding conditions.
    slices = [
        slice_("n", [bound("gpu-0"), gpu("gpu-1")], pool="aa", name="aa"),
        slice_("n", [gpu("gpu-0"), gpu("gpu-1")], pool="zz", name="zz"),
    ]
    e = Engine(slices, [device_class()], [])
    assert [p.name for p in e.node_pools(e.nodes[0])] == ["zz", "aa"]
    pod = [claim(exactly(), name=f"c{i}") for i in range(3)]
    p = e.allocate_pod(pod)
    assert p.ok
    results = [(pl.allocation or {})["devices"]["results"][0] for pl in p.placements]
    assert [(r["pool"], r["device"]) for r in results] == [
        ("zz", "gpu-0"),
        ("zz", "gpu-1"),
        ("aa", "gpu-0"),
    ]
    # A device with binding conditions passes them on in its result.
    assert results[2]["bindingConditions"] == ["example.com/attached"]
    assert results[2]["bindingFailureConditions"] == ["example.com/failed"]
    assert "bindingConditions" not in results[0]


def test_existing_allocations_count_for_every_claim_of_the_pod() -> None:
    e = Engine([h100_a100()], [device_class()], [allocated("a", "gpu-1")])
    p = e.allocate_pod([claim(exactly(), name="x"), claim(exactly(), name="y")])
    assert not p.ok and p.error is None
