"""``resources.limits: kubeacc.io/gpu: 2`` on a cluster half on DRA, half on the device plugin.

Two real kubelets: on ``dra-node`` the agent publishes its GPUs in ResourceSlices, on
``plugin-node`` it serves them through the device plugin (the node advertises kubeacc.io/gpu).
The same pod spec runs on both: kube-scheduler turns the limit into a ResourceClaim of
gpu.kubeacc.io (its ``extendedResourceName``) on the DRA node and counts the node's allocatable
on the plugin node; neither node's GPUs are counted by both. Last, the plugin node moves to
DRA by the steps of docs/dra.md ("Per-node migration"), and the pods that were not asked to move
keep running.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from kubeacc.synthetic import profiles
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed

from ...nodestack import pod_phase, unschedulable
from ...testbed.helpers import eventually
from .agentproc import AgentProcess

pytestmark = pytest.mark.cluster

DRA_NODE = "dra-node"
PLUGIN_NODE = "plugin-node"
NS = "extended"
GPU = "kubeacc.io/gpu"
#: The module's agents by node (the migration test restarts one in the other mode).
AGENTS: dict[str, AgentProcess] = {}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    tb = Testbed.start(
        nodes=[KubeletOptions(node_name=DRA_NODE), KubeletOptions(node_name=PLUGIN_NODE)]
    )
    work = tmp_path_factory.mktemp("extended")
    agents = []
    try:
        for node, extra in (
            (DRA_NODE, []),
            (
                PLUGIN_NODE,
                [
                    "--device-plugin-type=gpu",
                    f"--device-plugin-dir={tb.node(PLUGIN_NODE).device_plugin_dir}",
                ],
            ),
        ):
            host = profiles.build("dgx-h100", work / node / "host")
            agent = AgentProcess(node, host, tb.kubeconfig, tb.node(node).root_dir, work / node)
            agents.append(agent)
            AGENTS[node] = agent
            agent.start(extra=extra)
            agent.wait_registered(90)
        tb.client().create(Namespace(metadata={"name": NS}))  # type: ignore[arg-type]
        yield tb
    finally:
        for agent in agents:
            agent.stop()
        tb.stop()


def _gpu_pod(name: str, node: str, count: int) -> Any:
    limits = {"resources": {"limits": {GPU: str(count)}}} if count else {}
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/app:1",
                        **limits,
                    }
                ],
            },
        }
    )


def _allocatable(client: Client, node: str) -> dict[str, str]:
    status = client.get(Node, node).status
    return dict((status.allocatable if status else None) or {})


def test_limits_run_through_dra_on_a_dra_node(two_nodes: Testbed) -> None:
    tb = two_nodes
    client = tb.client(field_manager="kubeacc-test")
    assert GPU not in _allocatable(client, DRA_NODE)  # no device plugin for GPUs there
    client.create(_gpu_pod("via-dra", DRA_NODE, 2))
    eventually(lambda: pod_phase(client, "via-dra", NS) == "Running", 120, "via-dra Running")

    pod = as_dict(client.get(Pod, "via-dra", namespace=NS))
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
    ]
    claim = as_dict(client.get(ResourceClaim, status["resourceClaimName"], namespace=NS))
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.kubeacc.io"
    assert request["exactly"]["count"] == 2
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2
    assert {(r["driver"], r["pool"]) for r in results} == {(DRIVER_NAME, DRA_NODE)}
    assert all(r["device"].startswith("gpu-") for r in results), results
    (record,) = tb.node(DRA_NODE).container_records(namespace=NS, pod="via-dra")
    uid = claim["metadata"]["uid"]
    assert sorted(record.cdi_devices) == sorted(
        f"kubeacc.io/claim={uid}-{r['device']}" for r in results
    )

    # DRA counts what it gave: 7 whole GPUs (the 8th is in MIG mode), 2 taken, 6 do not fit
    client.create(_gpu_pod("too-many", DRA_NODE, 6))
    message = eventually(lambda: unschedulable(client, "too-many", NS), 60, "too-many refused")
    assert pod_phase(client, "too-many", NS) == "Pending", message
    client.delete(Pod, "too-many", namespace=NS)


def test_limits_run_through_the_device_plugin_on_a_plugin_node(two_nodes: Testbed) -> None:
    tb = two_nodes
    client = tb.client(field_manager="kubeacc-test")
    eventually(lambda: _allocatable(client, PLUGIN_NODE).get(GPU) == "8", 60, "plugin's GPUs")
    client.create(_gpu_pod("via-plugin", PLUGIN_NODE, 2))
    eventually(lambda: pod_phase(client, "via-plugin", NS) == "Running", 120, "via-plugin Running")

    pod = as_dict(client.get(Pod, "via-plugin", namespace=NS))
    assert "extendedResourceClaimStatus" not in pod["status"]
    claims = [
        c
        for c in client.list(ResourceClaim, namespace=NS)
        if any(o.name == "via-plugin" for o in (c.metadata.ownerReferences or []))
    ]
    assert claims == []  # counted by the node's allocatable only, never by DRA as well
    (record,) = tb.node(PLUGIN_NODE).container_records(namespace=NS, pod="via-plugin")
    assert record.envs["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 2
    assert record.cdi_devices == ()


def _running_as_before(client: Client, name: str, uid: str) -> bool:
    pod = as_dict(client.get(Pod, name, namespace=NS))
    restarts = [c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or []]
    return pod["metadata"]["uid"] == uid and pod["status"]["phase"] == "Running" and restarts == [0]


def test_a_plugin_node_moves_to_dra_and_the_other_pods_keep_running(two_nodes: Testbed) -> None:
    """docs/dra.md, "Per-node migration": cordon, the node's GPU pods end, the agent restarts
    without --device-plugin-type=gpu, uncordon; the same pod spec then runs through DRA there."""
    tb = two_nodes
    client = tb.client(field_manager="kubeacc-test")
    eventually(lambda: _allocatable(client, PLUGIN_NODE).get(GPU) == "8", 60, "plugin's GPUs")
    client.create(_gpu_pod("gpu-before", PLUGIN_NODE, 2))
    client.create(_gpu_pod("no-gpu", PLUGIN_NODE, 0))
    client.create(_gpu_pod("other-node", DRA_NODE, 1))
    kept = {}
    for name in ("gpu-before", "no-gpu", "other-node"):
        eventually(lambda n=name: pod_phase(client, n, NS) == "Running", 120, f"{name} Running")
        kept[name] = as_dict(client.get(Pod, name, namespace=NS))["metadata"]["uid"]
    del kept["gpu-before"]

    # 1. the DeviceClasses are there (the agents applied them); 2. cordon, the GPU pods end
    client.patch(Node, PLUGIN_NODE, {"spec": {"unschedulable": True}})
    users = [  # this pod, and an earlier test's
        name
        for pod in client.list(Pod, namespace=NS)
        if (d := as_dict(pod))["spec"].get("nodeName") == PLUGIN_NODE
        and any(GPU in c.get("resources", {}).get("limits", {}) for c in d["spec"]["containers"])
        and (name := d["metadata"]["name"])
    ]
    assert "gpu-before" in users
    for name in users:
        client.delete(Pod, name, namespace=NS, grace_period=0)
    eventually(lambda: not any(_exists(client, n) for n in users), 60, "the GPU pods gone")
    # 3. the agent again, in DRA mode for GPUs
    agent = AGENTS[PLUGIN_NODE]
    agent.stop()
    agent.start()
    agent.wait_registered(90)
    eventually(lambda: int(_allocatable(client, PLUGIN_NODE).get(GPU, "0")) == 0, 60, "no plugin")
    # 4. uncordon: the same pod spec runs through DRA on the node
    client.patch(Node, PLUGIN_NODE, {"spec": {"unschedulable": False}})
    client.create(_gpu_pod("gpu-after", PLUGIN_NODE, 2))
    eventually(lambda: pod_phase(client, "gpu-after", NS) == "Running", 120, "gpu-after Running")
    status = as_dict(client.get(Pod, "gpu-after", namespace=NS))["status"]
    claim = as_dict(
        client.get(
            ResourceClaim, status["extendedResourceClaimStatus"]["resourceClaimName"], namespace=NS
        )
    )
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"]) for r in results] == [(DRIVER_NAME, PLUGIN_NODE)] * 2
    (record,) = tb.node(PLUGIN_NODE).container_records(namespace=NS, pod="gpu-after")
    assert len(record.cdi_devices) == 2 and "NVIDIA_VISIBLE_DEVICES" not in record.envs

    # The pods nobody moved: same pod, never restarted, on both nodes.
    for name, uid in kept.items():
        assert _running_as_before(client, name, uid), name


def _exists(client: Client, name: str) -> bool:
    return any(as_dict(p)["metadata"]["name"] == name for p in client.list(Pod, namespace=NS))
