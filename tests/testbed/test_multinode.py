"""The multi-node testbed: four real kubelets on this machine, each a Ready Node with its own
directories, ports, runtime and labels; each kubelet calls the agent of its own node, and a pod
asking for each node's kind of device runs there on that node's devices."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.testbed import KUBERNETES_VERSION, Testbed
from kubeacc.testbed.shapes import MULTINODE_SHAPES, PROFILE_LABEL, SHAPE_LABEL
from tests.agent.dra.test_e2e import claim_obj, pod_obj

from .helpers import eventually

pytestmark = pytest.mark.cluster

#: node -> (DeviceClass, CEL selector) of a device only that node has
NODE_DEVICES = {
    "gpu-server": (
        "gpu.kubeacc.io",
        'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")',
    ),
    "fpga-node": ("fpga.kubeacc.io", 'device.attributes["kubeacc.io"].vendor == "Intel"'),
    "kunlun-node": ("xpu.kubeacc.io", None),
    "edge-node": (
        "gpu.kubeacc.io",
        'device.attributes["kubeacc.io"].model.startsWith("NVIDIA L4")',
    ),
}


def test_every_node_is_ready_with_its_shape(multinode_testbed: Testbed) -> None:
    tb = multinode_testbed
    client = tb.client()
    assert tb.node_names == [s.name for s in MULTINODE_SHAPES]
    for shape in MULTINODE_SHAPES:
        node = client.get(Node, shape.name)
        assert node.status and node.status.nodeInfo
        assert node.status.nodeInfo.kubeletVersion == KUBERNETES_VERSION
        ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready and ready[0].status == "True", (shape.name, ready)
        labels = (node.metadata.labels if node.metadata else None) or {}
        assert labels[SHAPE_LABEL] == shape.shape
        assert labels[PROFILE_LABEL] == shape.profile
        assert labels["kubernetes.io/hostname"] == shape.name
    kubelets = tb.kubelets
    # nothing shared: root dirs, runtimes, ports, device-plugin sockets (private mount namespaces)
    for attr in ("root_dir", "cri_socket", "port", "healthz_port", "kubelet_socket"):
        values = [getattr(k, attr) for k in kubelets]
        assert len(set(values)) == len(values), (attr, values)
    for k in kubelets:
        assert k.kubelet_socket.exists(), k.kubelet_socket
        assert k.pod_resources_socket.exists(), k.pod_resources_socket
        assert tb.kubelet_configz(k.node_name)["port"] == k.port
    memory = tb.memory()
    for name in tb.node_names:
        assert memory[f"kubelet {name}"] > 0 and memory[f"fake-cri {name}"] > 0


def test_each_kubelet_registers_its_own_nodes_agent(kubeacc_multinode: KubeaccStack) -> None:
    for name, node in kubeacc_multinode.nodes.items():
        registration = node.agent.registration
        assert registration is not None
        # the kubelet found the agent in its own plugins_registry and registered it
        assert registration.registered.wait(60), f"kubelet of {name} never registered its agent"
        kubelet = kubeacc_multinode.testbed.node(name)
        assert registration.socket_path.parent == kubelet.plugins_registry_dir


def _claim(name: str, ns: str, device_class: str, cel: str | None) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return claim_obj(name, ns, {"devices": {"requests": [{"name": "acc", "exactly": exactly}]}})


def _running(client: Client, ns: str) -> bool:
    pods = list(client.list(Pod, namespace=ns))
    return len(pods) == len(NODE_DEVICES) and all(
        p.status and p.status.phase == "Running" for p in pods
    )


def test_a_pod_runs_on_each_nodes_devices(
    kubeacc_multinode: KubeaccStack, multinode_namespace: str
) -> None:
    stack, ns = kubeacc_multinode, multinode_namespace
    tb = stack.testbed
    client = tb.client()
    for node, (device_class, cel) in NODE_DEVICES.items():
        client.create(_claim(node, ns, device_class, cel))
        client.create(pod_obj(node, ns, node))
    eventually(lambda: _running(client, ns), 120, "a Running pod per node")
    for node in NODE_DEVICES:
        pod = client.get(Pod, node, namespace=ns)
        assert pod.spec and pod.spec.nodeName == node
        claim = client.get(ResourceClaim, node, namespace=ns)
        assert claim.status and claim.status.allocation and claim.metadata
        (result,) = claim.status.allocation.devices.results
        assert result.pool == node
        # prepared by this node's agent, and by no other
        for other, components in stack.nodes.items():
            prepared = claim.metadata.uid in components.agent.driver.prepared()
            assert prepared == (other == node), (node, other)
        # started by this node's kubelet on this node's runtime, with our CDI device
        for kubelet in tb.kubelets:
            records = kubelet.container_records(namespace=ns, pod=node)
            assert bool(records) == (kubelet.node_name == node), (node, kubelet.node_name)
        (record,) = tb.node(node).container_records(namespace=ns, pod=node)
        assert any(d.startswith("kubeacc.io/") for d in record.cdi_devices), record.cdi_devices
