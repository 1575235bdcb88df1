"""The testbed's real-runtime mode: containerd + runc + CNI, containers really run.

What the fake CRI cannot show: a container's own output, an image that is not on the node
refusing to run, a pod address from the CNI network, and that this network and the runtime's
mounts stay inside the testbed.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.testbed import Testbed
from kubeacc.testbed.images import WORKLOAD_IMAGE
from kubeacc.testbed.runtime import POD_SUBNET, containerd_version
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def busybox_pod(name: str, ns: str, script: str, image: str = WORKLOAD_IMAGE) -> Any:
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "c",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", script],
                    }
                ],
            },
        }
    )


def phase(client: Client, name: str, ns: str) -> str:
    pod = client.get(Pod, name, namespace=ns)
    return (pod.status.phase if pod.status else None) or ""


def test_node_reports_containerd(runtime_testbed: Testbed) -> None:
    node = runtime_testbed.client().get(Node, runtime_testbed.node_name)
    assert node.status is not None and node.status.nodeInfo is not None
    version = containerd_version().lstrip("v")
    assert node.status.nodeInfo.containerRuntimeVersion == f"containerd://{version}"


def test_container_runs_and_its_output_is_logged(
    runtime_testbed: Testbed, runtime_namespace: str
) -> None:
    client = runtime_testbed.client()
    ns = runtime_namespace
    client.create(busybox_pod("hello", ns, "echo hello from $HOSTNAME; ls /dev; exit 3"))
    eventually(lambda: phase(client, "hello", ns) == "Failed", 90, "pod Failed (exit 3)")
    pod = client.get(Pod, "hello", namespace=ns)
    assert pod.status is not None and pod.status.containerStatuses is not None
    (status,) = pod.status.containerStatuses
    assert status.state is not None and status.state.terminated is not None
    assert status.state.terminated.exitCode == 3
    assert (status.containerID or "").startswith("containerd://")
    out = runtime_testbed.kubelet.container_log(ns, "hello", "c")
    assert "hello from hello\n" in out
    assert {"null", "zero", "urandom"} <= set(out.split())


def test_image_missing_from_the_node_does_not_run(
    runtime_testbed: Testbed, runtime_namespace: str
) -> None:
    client = runtime_testbed.client()
    ns = runtime_namespace
    client.create(busybox_pod("nope", ns, "true", image="kubeacc.local/not-loaded:1"))

    def reason() -> str | None:
        pod = client.get(Pod, "nope", namespace=ns)
        for st in (pod.status.containerStatuses if pod.status else None) or []:
            if st.state and st.state.waiting and st.state.waiting.reason != "ContainerCreating":
                return st.state.waiting.reason
        return None

    assert eventually(reason, 60, "a waiting reason") == "ErrImageNeverPull"


def test_pod_network_stays_in_the_testbed_namespace(
    runtime_testbed: Testbed, runtime_namespace: str
) -> None:
    client = runtime_testbed.client()
    ns = runtime_namespace
    client.create(busybox_pod("net", ns, "cat /proc/net/dev; sleep 3600"))
    eventually(lambda: phase(client, "net", ns) == "Running", 90, "pod Running")
    pod = client.get(Pod, "net", namespace=ns)
    assert pod.status is not None and pod.status.podIP
    assert ipaddress.ip_address(pod.status.podIP) in ipaddress.ip_network(POD_SUBNET)
    out = eventually(lambda: runtime_testbed.kubelet.container_log(ns, "net", "c"), 30, "log")
    assert "eth0:" in out and "lo:" in out
    # The bridge lives in the node's own network namespace, not on this machine.
    containerd = runtime_testbed.kubelet.containerd
    assert containerd is not None
    assert not Path("/sys/class/net/kbr0").exists()
    assert Path("/run/netns", containerd.netns).exists()
