"""The testbed is a real cluster: versions, a Ready node, pods that run, CRDs."""

from __future__ import annotations

import json
import subprocess

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.testbed import KUBERNETES_VERSION, Testbed

from .helpers import eventually

pytestmark = pytest.mark.cluster


def test_components_report_the_pinned_version(testbed: Testbed) -> None:
    out = subprocess.run(
        [*testbed.kubectl(), "version", "-o", "json"], check=True, capture_output=True, text=True
    )
    versions = json.loads(out.stdout)
    assert versions["serverVersion"]["gitVersion"] == KUBERNETES_VERSION
    assert versions["clientVersion"]["gitVersion"] == KUBERNETES_VERSION


def test_node_is_ready(testbed: Testbed, kube_client: Client) -> None:
    node = kube_client.get(Node, testbed.node_name)
    assert node.status is not None and node.status.nodeInfo is not None
    assert node.status.nodeInfo.kubeletVersion == KUBERNETES_VERSION
    ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
    assert ready and ready[0].status == "True", ready
    assert node.metadata is not None and node.metadata.labels is not None
    assert node.metadata.labels["kubernetes.io/hostname"] == testbed.node_name


def test_plain_pod_runs_on_the_kubelet(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    pod = from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plain", "namespace": namespace},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "env": [{"name": "GREETING", "value": "hello"}],
                    }
                ]
            },
        }
    )
    kube_client.create(pod)

    def running() -> Pod | None:
        p = kube_client.get(Pod, "plain", namespace=namespace)
        return p if p.status and p.status.phase == "Running" else None

    got = eventually(running, 60, "pod Running")
    assert got.spec is not None and got.spec.nodeName == testbed.node_name
    assert got.status is not None and got.status.containerStatuses
    assert got.status.containerStatuses[0].ready is True

    # The kubelet really asked the runtime to create the container with the pod's settings.
    records = testbed.kubelet.container_records(namespace=namespace, pod="plain")
    assert len(records) == 1
    assert records[0].container == "main"
    assert records[0].envs["GREETING"] == "hello"
    assert any(m.container_path == "/etc/hosts" for m in records[0].mounts)


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.kubeacc.io"},
    "spec": {
        "group": "test.kubeacc.io",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_crd_and_custom_resource(kube_client: Client, namespace: str) -> None:
    kube_client.create(from_dict(CRD))

    def established() -> bool:
        crd = kube_client.get(CustomResourceDefinition, "widgets.test.kubeacc.io")
        conds = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    eventually(established, 30, "CRD Established")
    widget = create_namespaced_resource("test.kubeacc.io", "v1", "Widget", "widgets")
    kube_client.create(
        widget(metadata=ObjectMeta(name="w1", namespace=namespace), spec={"size": 3})
    )
    got = kube_client.get(widget, "w1", namespace=namespace)
    assert got["spec"]["size"] == 3

    # The API server enforces the schema: the cluster is real, not a store of anything.
    with pytest.raises(ApiError) as err:
        kube_client.create(
            widget(metadata=ObjectMeta(name="w2", namespace=namespace), spec={"size": 0})
        )
    assert err.value.status.code == 422
