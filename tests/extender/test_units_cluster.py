"""Normalized units and model preferences on the real testbed: kube-scheduler configured with
kubeacc extender, real kubelets, three nodes of mixed generations.

* ``gpu-m``: 2 NVIDIA H100 + 1 L4, ``gpu-l``: 2 L4 — GPUs through the device plugin (shared,
  with ``kubeacc.io/gpu-units``: 989 per H100, 121 per L4 from the built-in table);
* ``dra-m``: 2 H100 + 1 L4 through DRA (ResourceSlices with ``kubeacc.io/units``).

Tests run in order and clean up their pods.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.agent.dra.classes import apply_device_classes
from kubeacc.agent.lifecycle.agent import LifecycleAgent
from kubeacc.crds.resources import Accelerator, as_dict, install_crds
from kubeacc.extender.wants import MIX_ANNOTATION, PREFER_ANNOTATION, UNITS
from kubeacc.synthetic import profiles
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.testbed.identities import agent_kubeconfig, install_agent_access
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from kubeacc.units.claims import preference_claim
from tests.agent.dra.agentproc import AgentProcess
from tests.extender.test_cluster import (
    Extender,
    _allocatable,
    _decision,
    _extender_kubeconfig,
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


@dataclass
class Cluster:
    testbed: Testbed
    client: Client
    extender: Extender


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("units")
    port = free_port()
    extenders = [
        {
            "urlPrefix": f"http://127.0.0.1:{port}",
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            # model preference must outweigh the default plugins' spreading (docs/extender.md)
            "weight": 5,
            "nodeCacheCapable": True,
            "httpTimeout": "10s",
            "managedResources": [
                {"name": "kubeacc.io/gpu-memory"},
                {"name": "kubeacc.io/gpu-cores"},
                {"name": "kubeacc.io/gpu-units"},
                {"name": "kubeacc.io/gpu"},
            ],
        }
    ]
    workdir = Path(tempfile.mkdtemp(prefix="kacc-units-"))
    tb = Testbed.start(
        workdir,
        nodes=[KubeletOptions(node_name=n) for n in [*PLUGIN_NODES, DRA_NODE]],
        scheduler_extenders=extenders,
    )
    failed = request.session.testsfailed
    agents: list[AgentProcess] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()
    extender: Extender | None = None
    try:
        client = tb.client(field_manager="kubeacc-test")
        install_crds(client)
        install_agent_access(client)
        apply_device_classes(client)
        config = tmp / "dp.yaml"
        config.write_text("types:\n  gpu: {shared: true, units: true}\n")
        for node, profile in [*PLUGIN_NODES.items(), (DRA_NODE, "h100-l4")]:
            work = tmp / node
            work.mkdir()
            host = profiles.build(profile, work / "host", seed=node)
            kubeconfig = agent_kubeconfig(tb, node, work)
            agent = AgentProcess(node, host, kubeconfig, tb.node(node).root_dir, work)
            if node == DRA_NODE:
                agent.start(apply_classes=False)  # every type through DRA
            else:
                agent.start(extra=[f"--device-plugin-config={config}"], apply_classes=False)
                lifecycle = LifecycleAgent(
                    Client(KubeConfig.from_file(kubeconfig)),
                    node_name=node,
                    host_root=host,
                    bitstream_dir=work,
                    kernel=SyntheticKernel(host),
                    interval=1.0,
                )
                threads.append(threading.Thread(target=lifecycle.run, args=(stop,), daemon=True))
                threads[-1].start()
            agents.append(agent)
        for agent in agents:
            agent.wait_registered(120)
        units = {"gpu-m": str(2 * 989 + 121), "gpu-l": str(2 * 121)}
        for node, want in units.items():
            eventually(
                lambda n=node, w=want: _allocatable(client, n).get(UNITS) == w,  # type: ignore[misc]
                120,
                f"{UNITS} on {node}",
            )
        eventually(
            lambda: (
                sum(
                    (as_dict(a).get("status") or {}).get("device", {}).get("type") == "gpu"
                    for a in client.list(Accelerator)
                )
                == 5
            ),
            120,
            "GPU Accelerators",
        )
        eventually(lambda: _dra_units(client) == [121, 989, 989], 120, "units in dra-m's slices")
        extender = Extender(_extender_kubeconfig(tb, client, tmp), port, tmp / "extender.log")
        extender.start()
        with contextlib.suppress(ApiError):
            client.create(
                from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            )
        tb.wait_service_account(NS)
        yield Cluster(tb, client, extender)
    except BaseException:
        tb.keep = True
        raise
    finally:
        if extender is not None:
            extender.stop()
        for agent in agents:
            agent.stop()
        stop.set()
        for t in threads:
            t.join(10)
        tb.stop()
        if request.session.testsfailed == failed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\nunits testbed kept in {workdir}, extender log {tmp / 'extender.log'}")


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
    import json
    import urllib.request

    decision = _decision(cluster.client, name)
    url = f"http://127.0.0.1:{cluster.extender.port}/state?node={decision.node}"
    with urllib.request.urlopen(url, timeout=5) as r:
        gpus = json.loads(r.read())["node"]["gpus"]
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
