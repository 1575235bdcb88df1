"""Normalized units and model preferences on the real testbed: kube-scheduler configured with
kubeacc extender, real kubelets, three nodes of mixed generations.

* ``gpu-m``: 2 NVIDIA H100 + 1 L4, ``gpu-l``: 2 L4 — GPUs through the device plugin (shared,
  with ``kubeacc.io/gpu-units``: 989 per H100, 121 per L4 from the built-in table);
* ``dra-m``: 2 H100 + 1 L4 through DRA (ResourceSlices with ``kubeacc.io/units``).

Tests run in order and clean up their pods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.contracts.names import MIX_ANNOTATION, PREFER_ANNOTATION
from kubeacc.contracts.wants import UNITS
from kubeacc.crds.resources import as_dict
from kubeacc.units.claims import preference_claim
from tests.extender.clusterlib import MANAGED, Cluster, extender_cluster
from tests.extender.test_cluster import (
    _allocatable,
    _decision,
    _get,
    _phase,
    _unschedulable,
)
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

NS = "shares"  # the helpers of test_cluster read pods from this namespace
PLUGIN_NODES = {"gpu-m": "h100-l4", "gpu-l": "l4-pair"}
DRA_NODE = "dra-m"
H100, L4 = "h100-80gb-hbm3", "l4"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    with extender_cluster(
        tmp_path_factory.mktemp("units"),
        request,
        plugin_nodes=PLUGIN_NODES,
        dra_nodes={DRA_NODE: "h100-l4"},
        dp_config="types:\n  gpu: {shared: true, units: true}\n",
        gpus=5,
        namespace=NS,
        # model preference must outweigh the default plugins' spreading (docs/extender.md)
        weight=5,
        managed=(*MANAGED, UNITS),
    ) as cluster:
        units = {"gpu-m": str(2 * 989 + 121), "gpu-l": str(2 * 121)}
        for node, want in units.items():
            eventually(
                lambda n=node, w=want: _allocatable(cluster.client, n).get(UNITS) == w,  # type: ignore[misc]
                120,
                f"{UNITS} on {node}",
            )
        eventually(
            lambda: _dra_units(cluster.client) == [121, 989, 989], 120, "units in dra-m's slices"
        )
        yield cluster


def _dra_units(client: Client) -> list[int]:
    out = []
    for s in client.list(ResourceSlice):
        d = as_dict(s)
        if d["spec"].get("nodeName") != DRA_NODE:
            continue
        for dev in d["spec"].get("devices") or []:
            units = (dev.get("attributes") or {}).get("units")
            if units:
                out.append(int(units["int"]))
    return sorted(out)


@pytest.fixture
def kube(cluster: Cluster) -> Iterator[Client]:
    yield cluster.client
    for kind in (Pod, ResourceClaim):
        for o in cluster.client.list(kind, namespace=NS):
            assert o.metadata is not None and o.metadata.name is not None
            with contextlib.suppress(ApiError):
                cluster.client.delete(kind, o.metadata.name, namespace=NS, grace_period=0)
    eventually(lambda: not list(cluster.client.list(Pod, namespace=NS)), 90, "pods gone")
    eventually(
        lambda: not any(cluster.extender.holders(n) for n in PLUGIN_NODES),
        30,
        "extender saw them go",
    )


def _pod(name: str, limits: dict[str, str] | None = None, **notes: str) -> Any:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    if limits:
        container["resources"] = {"limits": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": notes},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]},
    }


def _running(client: Client, name: str, timeout: float = 180) -> None:
    def probe() -> bool:
        return _phase(client, name) == "Running"

    try:
        eventually(probe, timeout, f"pod {name} Running")
    except AssertionError as err:
        pod = _get(client, name)
        raise AssertionError(
            f"{err}: node {pod['spec'].get('nodeName')}, {_unschedulable(client, name)}"
        ) from err


def _models(cluster: Cluster, name: str) -> tuple[str, list[str]]:
    """(node, models of the GPUs the extender decided for the pod's container)."""
    decision = _decision(cluster.client, name)
    gpus = cluster.extender.state(decision.node)["gpus"]
    return decision.node, [gpus[b]["model"] for b in decision.containers[0].devices]


def test_a_units_request_is_placed_on_gpus_of_one_model(cluster: Cluster, kube: Client) -> None:
    # 1100 units: two H100s (1978) on gpu-m; nine L4s would be needed, nobody has them
    kube.create(from_dict(_pod("u-1100", {UNITS: "1100"})))
    _running(kube, "u-1100")
    node, models = _models(cluster, "u-1100")
    assert (node, models) == ("gpu-m", [H100, H100])
    decision = _decision(kube, "u-1100")
    (record,) = cluster.testbed.node(node).container_records(namespace=NS, pod="u-1100")
    assert record.envs["ACCELERATOR_UNITS"].split(",") == list(decision.containers[0].devices)
    # 240 units ranked L4 first: gpu-m's one L4 is 121, gpu-l's two are 242
    kube.create(from_dict(_pod("u-240", {UNITS: "240"}, **{PREFER_ANNOTATION: "L4"})))
    _running(kube, "u-240")
    assert _models(cluster, "u-240") == ("gpu-l", [L4, L4])


def test_models_are_not_mixed_unless_the_pod_allows_it(cluster: Cluster, kube: Client) -> None:
    kube.create(from_dict(_pod("h100", {"kubeacc.io/gpu": "1"}, **{PREFER_ANNOTATION: "H100"})))
    _running(kube, "h100")
    assert _models(cluster, "h100") == ("gpu-m", [H100])
    # gpu-m now has 989 + 121 units free: enough in total (what kube-scheduler counts), but
    # not from one model; the extender says so
    kube.create(from_dict(_pod("one-model", {UNITS: "1100"})))
    reason = eventually(lambda: _unschedulable(kube, "one-model"), 120, "unschedulable reason")
    assert "1100 units wanted, not reachable from one model" in reason, reason
    kube.create(from_dict(_pod("mixed", {UNITS: "1100"}, **{MIX_ANNOTATION: "true"})))
    _running(kube, "mixed")
    node, models = _models(cluster, "mixed")
    assert node == "gpu-m" and sorted(models) == [H100, L4]
    assert _phase(kube, "one-model") == "Pending"


def test_preferred_model_while_it_lasts_then_the_fallback(cluster: Cluster, kube: Client) -> None:
    got = []
    for i in range(4):  # one after the other: each sees the previous ones' GPUs taken
        name = f"pref-{i}"
        kube.create(
            from_dict(_pod(name, {"kubeacc.io/gpu": "1"}, **{PREFER_ANNOTATION: "H100,L4"}))
        )
        _running(kube, name)
        got.append(_models(cluster, name))
    assert [m for _, m in got] == [[H100], [H100], [L4], [L4]], got
    assert [n for n, _ in got[:2]] == ["gpu-m", "gpu-m"]


def test_dra_first_available_claim_gets_the_preferred_model_then_the_fallback(
    cluster: Cluster, kube: Client
) -> None:
    # the template the helper renders is a valid object for the API server too
    template = preference_claim("prefer", "H100,L4", namespace=NS, template=True)
    kube.create(from_dict(template))
    got = []
    for i in range(4):
        name = f"dra-{i}"
        kube.create(from_dict(preference_claim(name, "H100,L4", namespace=NS)))
        pod = _pod(name)
        pod["spec"]["resourceClaims"] = [{"name": "acc", "resourceClaimName": name}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "acc"}]}
        kube.create(from_dict(pod))
        if i < 3:
            _running(kube, name)
            claim = as_dict(kube.get(ResourceClaim, name, namespace=NS))
            (result,) = claim["status"]["allocation"]["devices"]["results"]
            got.append((_get(kube, name)["spec"]["nodeName"], result["request"]))
    assert got == [
        (DRA_NODE, "accelerators/h100"),
        (DRA_NODE, "accelerators/h100"),
        (DRA_NODE, "accelerators/l4"),
    ]
    reason = eventually(lambda: _unschedulable(kube, "dra-3"), 120, "dra-3 unschedulable")
    assert reason
