"""Extended resources served through DRA (kube-scheduler v1.37's special claim): which class
serves a resource, how a pod's containers become requests, and where the engine places them."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.engine.engine import Engine
from kubeacc.engine.extended import (
    ExtendedResourceError,
    PodExtended,
    class_by_resource,
    is_extended_name,
    plugin_use,
    pod_requests,
)
from kubeacc.engine.pools import Node
from tests.engine.helpers import claim, device_class, devices_of, exactly, gpu, slice_

GPU = "kubeacc.io/gpu"


def gpu_class(name: str = "gpu.kubeacc.io", created: str = "", resource: str = GPU) -> Any:
    c = device_class(name)
    c["spec"]["extendedResourceName"] = resource
    if created:
        c["metadata"]["creationTimestamp"] = created
    return c


def container(name: str, count: int | str | None, *, where: str = "limits", **kw: Any) -> Any:
    res = {} if count is None else {where: {GPU: str(count), "cpu": "1"}}
    return {"name": name, "resources": res, **kw}


def pod(*containers: Any, inits: tuple[Any, ...] = (), name: str = "p") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if inits:
        spec["initContainers"] = list(inits)
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def node(name: str, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", **(allocatable or {})}},
    }


def test_extended_names() -> None:
    assert is_extended_name(GPU)
    assert is_extended_name("deviceclass.resource.kubernetes.io/gpu.kubeacc.io")
    assert not is_extended_name("cpu")
    assert not is_extended_name("nvidia.kubernetes.io/gpu")
    assert not is_extended_name("requests.kubeacc.io/gpu")


def test_newest_class_wins_a_resource_and_every_class_has_its_implicit_name() -> None:
    got = class_by_resource(
        [
            gpu_class("old", "2026-01-01T00:00:00Z"),
            gpu_class("new", "2026-02-01T00:00:00Z"),
            gpu_class("b-same", "2026-02-01T00:00:00Z", resource="kubeacc.io/fpga"),
            gpu_class("a-same", "2026-02-01T00:00:00Z", resource="kubeacc.io/fpga"),
        ]
    )
    assert got[GPU] == "new"
    assert got["kubeacc.io/fpga"] == "a-same"
    assert got["deviceclass.resource.kubernetes.io/old"] == "old"


def test_pod_requests_sum_apps_and_sidecars_and_take_the_largest_init() -> None:
    p = pod(
        container("a", 2),
        container("b", 1, where="requests"),
        inits=(container("sidecar", 1, restartPolicy="Always"), container("init", 5)),
    )
    # apps 2 + 1 + sidecar 1 = 4; the init runs with the sidecar: 5 + 1 = 6
    assert pod_requests(p) == {GPU: 6}
    assert pod_requests(pod(container("a", None))) == {}


def test_a_fractional_or_garbled_count_is_refused() -> None:
    with pytest.raises(ExtendedResourceError, match="whole number"):
        pod_requests(pod(container("a", "500m")))
    with pytest.raises(ExtendedResourceError, match=r"kubeacc\.io/gpu"):
        pod_requests(pod(container("a", "two")))


def test_special_claim_requests_follow_the_scheduler_names() -> None:
    p = pod(container("a", 2), container("b", 1), inits=(container("init", 4),))
    ext = PodExtended.of(p, [gpu_class()])
    assert ext is not None
    got = ext.for_node(Node.from_dict(node("n")))
    assert got.reason is None and got.claim is not None
    reqs = got.claim["spec"]["devices"]["requests"]
    # index counts the init container first; the resource is second of ("cpu", "kubeacc.io/gpu")
    # the init container's 4 reuses the 2 + 1 of the apps after it and adds 1
    assert [(r["name"], r["exactly"]["count"]) for r in reqs] == [
        ("container-0-request-1", 1),
        ("container-1-request-1", 2),
        ("container-2-request-1", 1),
    ]
    assert {r["exactly"]["deviceClassName"] for r in reqs} == {"gpu.kubeacc.io"}
    init_maps = [m["requestName"] for m in got.mappings if m["containerName"] == "init"]
    assert init_maps == ["container-1-request-1", "container-2-request-1", "container-0-request-1"]


def test_a_node_with_the_device_plugin_serves_it_there() -> None:
    p = pod(container("a", 2))
    ext = PodExtended.of(
        p,
        [gpu_class()],
        plugin_use(
            [
                {
                    **pod(container("x", 1)),
                    "spec": {**pod(container("x", 1))["spec"], "nodeName": "dp"},
                }
            ]
        ),
    )
    assert ext is not None
    served = ext.for_node(Node.from_dict(node("dp", {GPU: "3"})))
    assert served.claim is None and served.plugin == {GPU: 2}
    full = ext.for_node(Node.from_dict(node("dp", {GPU: "2"})))
    assert full.reason is not None and "1 of 2 free" in full.reason
    # no class names the resource: the node must advertise it
    assert PodExtended.of(p, [device_class()]) is None


def two_nodes() -> list[Any]:
    return [slice_("a", [gpu("gpu-0")]), slice_("b", [gpu("gpu-0"), gpu("gpu-1"), gpu("gpu-2")])]


def test_engine_places_the_special_claim_on_a_node_with_enough_devices() -> None:
    e = Engine(two_nodes(), [gpu_class()], [], [node("a"), node("b")])
    ext = PodExtended.of(pod(container("a", 2)), e_classes := [gpu_class()])
    assert ext is not None and e_classes
    got = e.allocate_pod([], pod="default/p", extended=ext)
    assert got.ok and got.node == "b"
    (only,) = got.placements
    assert only.claim == "default/p-extended-resources"
    assert only.allocation is not None
    assert devices_of(only.allocation) == ["gpu-0", "gpu-1"]
    assert [r["request"] for r in only.allocation["devices"]["results"]] == [
        "container-0-request-1"
    ] * 2
    assert only.extended is not None and only.extended["requests"] == {GPU: 2}
    # committed: one GPU is left on b, a has one: a second pod of 2 fits nowhere
    again = e.allocate_pod([], pod="default/q", extended=ext)
    assert not again.ok and again.explanation is not None
    assert again.placements[0].claim == "default/p-extended-resources"


def test_the_special_claim_is_allocated_together_with_the_pods_claims() -> None:
    # node a: 2 GPUs; the user's claim and the pod's extended resource take one each
    e = Engine([slice_("a", [gpu("gpu-0"), gpu("gpu-1")])], [gpu_class()], [], [node("a")])
    ext = PodExtended.of(pod(container("a", 1)), [gpu_class()])
    assert ext is not None
    got = e.allocate_pod([claim(exactly(), name="mine")], pod="default/p", extended=ext)
    assert got.ok
    assert [devices_of(p.allocation or {}) for p in got.placements] == [["gpu-0"], ["gpu-1"]]
    ext3 = PodExtended.of(pod(container("a", 2)), [gpu_class()])
    assert ext3 is not None
    e2 = Engine([slice_("a", [gpu("gpu-0"), gpu("gpu-1")])], [gpu_class()], [], [node("a")])
    no = e2.allocate_pod([claim(exactly(), name="mine")], pod="default/p", extended=ext3)
    assert not no.ok and [p.claim for p in no.placements] == [
        "default/mine",
        "default/p-extended-resources",
    ]


def test_a_device_plugin_node_takes_the_pod_without_a_claim() -> None:
    e = Engine(two_nodes(), [gpu_class()], [], [node("dp", {GPU: "4"})])
    ext = PodExtended.of(pod(container("a", 3)), [gpu_class()])
    assert ext is not None
    got = e.allocate_pod([], pod="default/p", extended=ext)
    assert got.ok and got.node == "dp"
    (only,) = got.placements
    assert only.allocation == {"devices": {"results": [], "config": []}}
    assert only.extended is not None and only.extended["devicePlugin"] == {GPU: 3}


def test_dra_and_plugin_nodes_side_by_side_each_get_their_own_answer() -> None:
    ext = PodExtended.of(pod(container("a", 2)), [gpu_class()])
    assert ext is not None
    first = ext.for_node(Node.from_dict(node("a")))
    assert first.claim is not None
    assert ext.for_node(Node.from_dict(node("b"))) is first  # the same special claim
    plugin = ext.for_node(Node.from_dict(node("dp", {GPU: "2"})))
    assert plugin.claim is None and plugin.plugin == {GPU: 2}
    zero = ext.for_node(Node.from_dict(node("z", {GPU: "0"})))  # advertised, none left: DRA
    assert zero.claim is not None
    e = Engine(
        [slice_("a", [gpu("gpu-0")])], [gpu_class()], [], [node("a"), node("dp", {GPU: "2"})]
    )
    got = e.allocate_pod([], pod="default/p", extended=ext)
    assert got.ok and got.node == "dp"  # a has one GPU only
    assert e.allocate_pod([], pod="default/q", extended=ext).ok is False  # dp's two are taken
