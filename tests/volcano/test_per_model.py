"""Per-model resources under a real Volcano: kube-acc's device plugin serves
``kubeacc.io/gpu-<model>`` for three GPU models on two nodes (``amd-gpu``: AMD Instinct MI210
and Intel Flex 170; ``l4``: NVIDIA L4) and ``kubeacc.io/xpu-<model>`` for KunLun XPUs
(``kunlun``); Volcano counts them like any extended resource: one Job asking each model is
placed and run by the real kubelets, each pod on the node of its model, and a Queue whose
capability names a per-model resource holds a Job back until the capability grows."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from kubeacc.cli.demo_stack import KubeaccStack

from ..testbed.helpers import eventually
from .conftest import PodGroup, Queue, job_pods, job_running, phases, pod_spec, vcjob

pytestmark = pytest.mark.cluster

PREFIX = {"gpu": "kubeacc.io/gpu-", "xpu": "kubeacc.io/xpu-"}


def _per_model(client: Client, node: str, kind: str) -> list[str] | None:
    """The node's allocatable per-model names of ``kind`` (once the kubelet has them)."""
    obj = client.get(Node, node)
    allocatable = (obj.status.allocatable if obj.status else None) or {}
    names = sorted(
        n for n, v in allocatable.items() if n.startswith(PREFIX[kind]) and str(v) != "0"
    )
    return names or None


def _resources(client: Client) -> tuple[list[str], str, str]:
    """amd-gpu's two GPU models' resources, l4's one and kunlun's XPU resource."""
    amd = eventually(
        lambda: (g := _per_model(client, "amd-gpu", "gpu")) and len(g) == 2 and g,
        90,
        "two GPU models' resources on amd-gpu",
    )
    (l4,) = eventually(lambda: _per_model(client, "l4", "gpu"), 90, "the L4s' resource")
    (xpu,) = eventually(lambda: _per_model(client, "kunlun", "xpu"), 90, "the XPUs' resource")
    assert l4 not in amd, (l4, amd)
    return amd, l4, xpu


def test_a_job_of_three_gpu_models_on_two_nodes_and_kunlun_xpus_is_placed_and_run(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    amd, l4, xpu = _resources(client)
    #: task -> (its resource, per pod, its node)
    asks = {
        "gpu-a": (amd[0], 1, "amd-gpu"),
        "gpu-b": (amd[1], 1, "amd-gpu"),
        "gpu-l4": (l4, 2, "l4"),
        "xpu": (xpu, 2, "kunlun"),
    }
    tasks = [
        {"name": "gpu-a", "replicas": 1, "pod": pod_spec(limits={amd[0]: "1"})},
        {"name": "gpu-b", "replicas": 1, "pod": pod_spec(limits={amd[1]: "1"})},
        {"name": "gpu-l4", "replicas": 1, "pod": pod_spec(limits={l4: "2"})},
        {"name": "xpu", "replicas": 2, "pod": pod_spec(limits={xpu: "2"})},
    ]
    client.create(vcjob("mixed", ns, tasks, 5))
    eventually(lambda: job_running(client, ns, "mixed", 5), 180, "the mixed Job's 5 pods Running")

    units: dict[str, list[str]] = {}
    for pod in job_pods(client, ns, "mixed"):
        assert pod.spec and pod.metadata and pod.metadata.name
        task = (pod.metadata.annotations or {})["volcano.sh/task-spec"]
        _, count, node = asks[task]
        assert pod.spec.nodeName == node, (pod.metadata.name, pod.spec.nodeName)
        (record,) = stack.testbed.node(node).container_records(namespace=ns, pod=pod.metadata.name)
        # the device plugin's Allocate: the devices' BDFs in the container's environment
        got = record.envs["ACCELERATOR_UNITS"].split(",")
        assert len(got) == count, (task, got)
        units.setdefault(node, []).extend(got)
    # no device went to two pods; the two models of amd-gpu are two devices
    for node, got in units.items():
        assert len(set(got)) == len(got), (node, got)
    assert {n: len(u) for n, u in units.items()} == {"amd-gpu": 2, "l4": 2, "kunlun": 4}


def test_a_queue_capability_of_a_per_model_resource_holds_a_job_back(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    _, _, xpu = _resources(client)
    name = f"xpu-{ns[-6:]}"
    queue: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": False, "capability": {xpu: "2"}},
    }
    client.create(Queue.from_dict(queue))
    try:
        tasks = [{"name": "xpu", "replicas": 2, "pod": pod_spec(limits={xpu: "2"})}]
        client.create(vcjob("capped", ns, tasks, 2, queue=name))
        # the Job needs 4 of the model, the queue may hold 2: Volcano keeps it out
        eventually(lambda: list(client.list(PodGroup, namespace=ns)), 60, "the Job's PodGroup")
        end = time.monotonic() + 10
        while time.monotonic() < end:
            pods = job_pods(client, ns, "capped")
            assert not [p for p in pods if p.spec and p.spec.nodeName], phases(pods)
            time.sleep(0.5)
        client.patch(
            Queue,
            name,
            {"spec": {"capability": {xpu: "4"}}},
            patch_type=PatchType.MERGE,
        )
        eventually(lambda: job_running(client, ns, "capped", 2), 120, "the Job Running")
    finally:
        client.delete(Queue, name)
