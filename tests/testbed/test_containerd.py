"""The testbed's real-runtime mode: containerd + runc + CNI, containers really run.

What the fake CRI cannot show: a container's own output, an image that is not on the node
refusing to run, a pod address from the CNI network, and that this network and the runtime's
mounts stay inside the testbed; pods (hostNetwork or not) reaching the API server through the
``kubernetes`` Service with their service account's projected token, as in-cluster clients do.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.testbed import Testbed
from kubeacc.testbed.images import WORKLOAD_IMAGE
from kubeacc.testbed.kubeacc_image import KUBEACC_IMAGE, ensure_image
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


def test_kubectl_logs_and_exec_reach_the_container(
    runtime_testbed: Testbed, runtime_namespace: str
) -> None:
    """The API server dials the kubelet on the node's address (its end of the node's link)."""
    client = runtime_testbed.client()
    ns = runtime_namespace
    client.create(busybox_pod("talk", ns, "echo said-by-talk; sleep 3600"))
    eventually(lambda: phase(client, "talk", ns) == "Running", 90, "pod Running")
    kubectl = [*runtime_testbed.kubectl(), "-n", ns]

    def logs() -> str:
        done = subprocess.run(
            [*kubectl, "logs", "talk"], capture_output=True, text=True, check=False, timeout=60
        )
        return done.stdout

    assert eventually(logs, 30, "kubectl logs") == "said-by-talk\n"
    done = subprocess.run(
        [*kubectl, "exec", "talk", "--", "cat", "/proc/1/cmdline"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # The container's PID 1 (sh ran its last command in its place).
    assert done.stdout == "sleep\x003600\x00"


#: Run in the kube-acc image: who the API server says the pod's token belongs to, and where
#: the pod reached it (KUBERNETES_SERVICE_HOST/_PORT, the service account files).
WHOAMI = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
url = "https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews" % (
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
req = urllib.request.Request(url, body.encode(), method="POST", headers={
    "Authorization": "Bearer " + open(sa + "/token").read(),
    "Content-Type": "application/json"})
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
review = json.load(urllib.request.urlopen(req, context=ctx, timeout=30))
print(json.dumps({"url": url, "user": review["status"]["userInfo"]["username"]}))
"""


@pytest.fixture(scope="module")
def kubeacc_image(runtime_testbed: Testbed) -> Iterator[str]:
    containerd = runtime_testbed.kubelet.containerd
    assert containerd is not None
    containerd.import_image(ensure_image())
    yield KUBEACC_IMAGE


@pytest.mark.parametrize("host_network", [True, False], ids=["hostNetwork", "pod-network"])
def test_pods_reach_the_api_server_with_their_token(
    runtime_testbed: Testbed, runtime_namespace: str, kubeacc_image: str, host_network: bool
) -> None:
    client = runtime_testbed.client()
    ns = runtime_namespace
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "whoami", "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "hostNetwork": host_network,
            "containers": [
                {
                    "name": "c",
                    "image": kubeacc_image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", WHOAMI],
                }
            ],
        },
    }
    client.create(from_dict(pod))
    done = eventually(
        lambda: phase(client, "whoami", ns) in ("Succeeded", "Failed"), 120, "pod finished"
    )
    assert done
    out = runtime_testbed.kubelet.container_log(ns, "whoami", "c")
    assert phase(client, "whoami", ns) == "Succeeded", out
    seen = json.loads(out.strip().splitlines()[-1])
    # The projected token reached the container and the API server took it.
    assert seen["user"] == f"system:serviceaccount:{ns}:default"
    assert seen["url"].startswith("https://10.0.0.1:443/")
    status = client.get(Pod, "whoami", namespace=ns).status
    assert status is not None
    if host_network:
        # On the node's own address, in the node's network namespace (not the machine's).
        assert status.podIP == runtime_testbed.kubelet.address
    else:
        assert ipaddress.ip_address(status.podIP) in ipaddress.ip_network(POD_SUBNET)
