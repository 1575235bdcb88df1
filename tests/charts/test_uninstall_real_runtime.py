"""helm uninstall while a pod uses a kube-acc claim, on a node that runs real containers.

Without a check, the uninstall removes the agents while the kubelet still holds a prepared claim:
deleting the pod afterwards leaves the kubelet retrying "driver kubeacc.io is not registered"
(unprepare of the claim's devices) until a reinstall. The chart's pre-delete hook (``kubeacc
uninstall-check``, a Job in the kube-acc image) refuses instead and names the pod; nothing is
removed. Once the pod is gone the uninstall goes through, and the kubelet has nothing to retry.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.testbed import Testbed, withkubeacc
from tests.agent.test_real_runtime import one_gpu_claim, wait_running, workload
from tests.testbed.helpers import eventually

from .conftest import REAL_NODE, Helm

pytestmark = pytest.mark.cluster

NS = "kubeacc-system"
NODE = REAL_NODE
NOT_REGISTERED = "not registered"


def _gone(client: Client, kind: type[Pod] | type[ResourceClaim], name: str, ns: str) -> bool:
    try:
        client.get(kind, name, namespace=ns)
    except ApiError as err:
        return err.status.code == 404
    return False


def _installed_with_a_running_pod(tb: Testbed, tmp_path: Path, ns: str) -> Client:
    """The chart installed, and pod ``ns/app`` running with claim ``ns/gpu`` (one GPU)."""
    client = tb.client()
    withkubeacc.install(tb, tmp_path, nvml=False, images=False)
    client.create(Namespace(metadata=ObjectMeta(name=ns)))
    client.create(one_gpu_claim("gpu", ns))
    client.create(workload("app", ns, claim="gpu"))
    wait_running(client, "app", ns)
    return client


def test_uninstall_waits_for_pods_using_claims(
    real_cluster: tuple[Testbed, Helm], tmp_path: Path
) -> None:
    tb, helm = real_cluster
    client = _installed_with_a_running_pod(tb, tmp_path, "work")

    # The uninstall is refused: the hook names the pod, and nothing of the release is removed.
    refused = helm("uninstall", "kubeacc", "-n", NS, "--wait", "--timeout=3m", check=False)
    assert refused.returncode != 0, refused.stdout
    assert "job kubeacc-uninstall-check failed" in refused.stderr, refused.stderr
    job_pod = next(
        p.metadata.name
        for p in client.list(Pod, namespace=NS)
        if p.metadata and p.metadata.name and p.metadata.name.startswith("kubeacc-uninstall-")
    )
    log = tb.kubelet.container_log(NS, job_pod, "check")
    assert "claim work/gpu: pods work/app" in log, log
    assert "delete these pods first" in log
    client.get(DaemonSet, "kubeacc-agent", namespace=NS)
    assert helm("status", "kubeacc", "-n", NS).returncode == 0
    withkubeacc.wait_ready(client, "kubeacc-agent-")

    # The order the hook asks for: the pod (its claim unprepared by the agent), then uninstall.
    client.delete(Pod, "app", namespace="work")
    eventually(lambda: _gone(client, Pod, "app", "work"), 120, "the workload pod gone")
    mark = tb.kubelet.log_path.stat().st_size
    helm("uninstall", "kubeacc", "-n", NS, "--wait", "--timeout=4m")
    assert not list(client.list(Job, namespace=NS)), "hook Jobs deleted once they succeeded"
    eventually(lambda: not list(client.list(DaemonSet, namespace=NS)), 60, "agents removed")
    client.delete(Namespace, "work")
    eventually(lambda: _gone(client, ResourceClaim, "gpu", "work"), 120, "the claim deleted")
    time.sleep(5)  # the kubelet would be retrying by now
    with tb.kubelet.log_path.open("rb") as f:
        f.seek(mark)
        after = f.read().decode(errors="replace")
    assert NOT_REGISTERED not in after, [ln for ln in after.splitlines() if NOT_REGISTERED in ln]


def test_without_the_check_the_kubelet_retries(
    own_real_cluster: tuple[Testbed, Helm], tmp_path: Path
) -> None:
    """What the hook prevents, reproduced: ``--no-hooks`` removes the agents under a running pod;
    deleting the pod then leaves the kubelet retrying the gone driver (hence a cluster of its
    own: nothing short of a reinstall ends that)."""
    tb, helm = own_real_cluster
    client = _installed_with_a_running_pod(tb, tmp_path, "work2")

    helm("uninstall", "kubeacc", "-n", NS, "--wait", "--timeout=4m", "--no-hooks")
    eventually(lambda: _pod_gone_prefix(client, "kubeacc-agent-"), 120, "agent pods gone")
    mark = tb.kubelet.log_path.stat().st_size
    client.delete(Pod, "app", namespace="work2")

    def retrying() -> bool:
        """The kubelet has tried to unprepare the claim, against the gone driver, twice."""
        with tb.kubelet.log_path.open("rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace").count(NOT_REGISTERED) >= 2

    eventually(retrying, 90, "the kubelet retrying the unregistered driver")


def _pod_gone_prefix(client: Client, prefix: str) -> bool:
    return not [
        p
        for p in client.list(Pod, namespace=NS)
        if p.metadata and p.metadata.name and p.metadata.name.startswith(prefix)
    ]
