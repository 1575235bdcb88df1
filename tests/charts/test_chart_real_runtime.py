"""The chart as installed, on a node that runs real containers (containerd + runc).

``helm install`` puts kube-acc on a one-node cluster whose kubelet runs on the real runtime;
the kube-acc image (kubeacc.testbed.kubeacc_image) is imported into the node's containerd, the
agent's host paths point at a synthetic 8-GPU host (``agent.hostRoot``) whose device nodes are
real character devices made with mknod. No kube-acc process is started by the test: the agent
DaemonSet (DRA mode, then upgraded to device-plugin mode), the controller Deployment and the
clean-up Job are the chart's pods, in containers.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.resources import Accelerator
from kubeacc.node import cdi as dra_cdi
from kubeacc.testbed import Testbed, withkubeacc
from kubeacc.testbed.kubeacc_image import KUBEACC_IMAGE
from tests.agent.test_real_runtime import (
    Seen,
    bus_ids,
    null_numbers,
    one_gpu_claim,
    running_container,
    wait_running,
    workload,
)
from tests.crdfixtures import put_policy
from tests.testbed.helpers import eventually

from .conftest import REAL_NODE, Helm

pytestmark = pytest.mark.cluster

NS = "kubeacc-system"
NODE = REAL_NODE


def _agent_after_upgrade(client: Client, old: str) -> str:
    """The name of the agent pod that replaced ``old`` (rolled by an upgrade), once ready."""

    def rolled() -> str | None:
        pod = withkubeacc.ready_pod(client, "kubeacc-agent-")
        name = pod.metadata.name if pod and pod.metadata else None
        return name if name and name != old else None

    return eventually(rolled, 180, "the upgraded agent pod ready")


def _container_id(client: Client, pod: str, container: str) -> str | None:
    """The id of ``container``'s running instance in ``pod`` (None while it is not running)."""
    status = client.get(Pod, pod, namespace=NS).status
    for st in (status.containerStatuses if status else None) or []:
        if st.name == container and st.state and st.state.running and st.containerID:
            return st.containerID.removeprefix("containerd://")
    return None


def _running_tasks(tb: Testbed) -> dict[str, str]:
    """containerd's own view: task id -> status."""
    assert tb.kubelet.containerd is not None
    lines = tb.kubelet.containerd.ctr("tasks", "list").stdout.splitlines()[1:]
    return {f[0]: f[2] for f in (line.split() for line in lines) if len(f) >= 3}


def _container_images(tb: Testbed) -> dict[str, str]:
    """containerd's containers: id -> image."""
    assert tb.kubelet.containerd is not None
    lines = tb.kubelet.containerd.ctr("containers", "list").stdout.splitlines()[1:]
    return {f[0]: f[1] for f in (line.split() for line in lines) if len(f) >= 2}


def _slices(client: Client) -> list[ResourceSlice]:
    return list(
        client.list(ResourceSlice, fields={"spec.nodeName": NODE, "spec.driver": DRIVER_NAME})
    )


def test_chart_pods_run_in_real_containers(
    real_cluster: tuple[Testbed, Helm], tmp_path: Path
) -> None:
    tb, helm = real_cluster
    client = tb.client()
    # NVML off first: `helm test` must fail on the GPUs' unknown memory
    kubeacc = withkubeacc.install(tb, tmp_path, nvml=False, images=False, wait=False)
    host = kubeacc.host

    # The agent DaemonSet's pod runs the kube-acc image in containerd, both containers ready.
    agent = withkubeacc.wait_ready(client, "kubeacc-agent-")
    assert agent.spec is not None and agent.spec.nodeName == NODE
    images = _container_images(tb)
    tasks = _running_tasks(tb)
    assert agent.status is not None and agent.status.containerStatuses is not None
    for st in agent.status.containerStatuses:
        cid = (st.containerID or "").removeprefix("containerd://")
        assert tasks.get(cid) == "RUNNING", (st.name, tasks)
        assert images[cid] == KUBEACC_IMAGE
    assert agent.metadata is not None and agent.metadata.name is not None
    agent_name = agent.metadata.name

    # It registered with the kubelet and published this node's devices: 8 GPUs.
    def gpus_published() -> int | None:
        names = [d.name for s in _slices(client) for d in s.spec.devices or []]
        gpus = [n for n in names if n.startswith("gpu")]
        return len(gpus) if len(gpus) == 8 else None

    eventually(gpus_published, 120, "the agent pod's ResourceSlices")
    log = tb.kubelet.container_log(NS, agent_name, "agent")
    assert "kubelet registered plugin kubeacc.io" in log, log[-3000:]

    # The life-cycle container reports the inventory as Accelerator objects (one write per
    # device: wait for them all, not for the first).
    def accelerators() -> int | None:
        count = len(list(client.list(Accelerator, labels={NODE_LABEL: NODE})))
        return count if count >= 8 else None

    eventually(accelerators, 120, "Accelerator objects")

    # The controller Deployment's pod runs (non-root, read-only root), leads and does its job:
    # a policy becomes a DeviceClass.
    controller = withkubeacc.wait_ready(client, "kubeacc-controller-")
    assert controller.metadata is not None
    lease = eventually(
        lambda: client.get(Lease, "kubeacc-controller", namespace=NS).spec.holderIdentity,
        60,
        "the controller's lease",
    )
    assert lease == controller.metadata.name
    put_policy(client, "real-h100", {"selector": {"types": ["gpu"]}})

    def policy_class() -> bool:
        try:
            client.get(DeviceClass, "real-h100.policy.kubeacc.io")
        except ApiError:
            return False
        return True

    eventually(policy_class, 60, "the policy's DeviceClass")

    # helm test runs `kubeacc status` in a pod of the chart's image. NVML is off in these
    # values, so the GPUs' memory is unknown: it fails, and its log names the check and the fix.
    broken = helm("test", "kubeacc", "-n", NS, "--logs", "--timeout=3m", check=False)
    assert broken.returncode != 0, broken.stdout[broken.stdout.find("POD LOGS") :]
    assert "Phase:          Failed" in broken.stdout, broken.stdout
    assert "memory unknown: NVML not found" in broken.stdout, broken.stdout
    assert "nvidia.driverRoot / nvidia.libraryDir" in broken.stdout, broken.stdout
    # With NVML (the synthetic host's description, /.synthetic mounted where the agent's
    # --host-root sees it) the agent labels the GPUs' memory, and the test passes.
    kubeacc.upgrade(withkubeacc.chart_values(tb.kubelet, host, tmp_path, nvml=True))

    def memory_labelled() -> str | None:
        node = client.get(Node, NODE)
        return ((node.metadata and node.metadata.labels) or {}).get("kubeacc.io/gpu.memory")

    agent_name = _agent_after_upgrade(client, agent_name)

    def agent_logs() -> str:
        return "\n".join(
            line
            for c in ("agent", "lifecycle")
            for line in tb.kubelet.container_log(NS, agent_name, c).splitlines()
            if "nvml" in line.lower() or "synthetic" in line.lower() or "Error" in line
        )

    eventually(memory_labelled, 120, "the GPUs' memory label (NVML found)", agent_logs)
    ok = helm("test", "kubeacc", "-n", NS, "--logs", "--timeout=3m", check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Phase:          Succeeded" in ok.stdout, ok.stdout
    assert "memory unknown" not in ok.stdout

    # A workload with a claim for one GPU: its own output shows the device CDI injected.
    client.create(Namespace(metadata=ObjectMeta(name="work")))
    client.create(one_gpu_claim("gpu", "work"))
    client.create(workload("app", "work", claim="gpu"))

    def listing() -> str:
        text = tb.kubelet.container_log("work", "app", "app")
        return text if "END-OF-LISTING" in text else ""

    got = Seen(eventually(listing, 120, "the workload's output"))
    claim = client.get(ResourceClaim, "gpu", namespace="work")
    (bus,) = bus_ids(client, claim, NODE).values()
    assert got.env["ACCELERATOR_UNITS"] == bus
    assert got.env["KUBEACC_CLAIM"] == "work/gpu"
    (gpu,) = got.char_devices(r"/dev/nvidia\d+")
    assert got.dev[gpu][1] == null_numbers()
    assert claim.metadata is not None and claim.metadata.uid
    spec = json.loads(dra_cdi.spec_path(tb.kubelet.cdi_dir, claim.metadata.uid).read_text())
    for d in spec["devices"]:
        for n in d["containerEdits"].get("deviceNodes", []):
            assert n["hostPath"] == str(host / n["path"].lstrip("/"))
            assert stat.S_ISCHR(os.stat(n["hostPath"]).st_mode)

    # The agent's container killed outright: the kubelet restarts it, the workload keeps its
    # container and its claim, and the restarted agent serves a new claim.
    # The log can come before the pod's status says Running: wait for the status.
    workload_container = wait_running(client, "app", "work")
    agent_cid = _container_id(client, agent_name, "agent")
    containerd = tb.kubelet.containerd
    assert containerd is not None
    containerd.ctr("tasks", "kill", "--signal", "SIGKILL", agent_cid)

    def restarted() -> str | None:
        """The agent's new container once the pod is ready again and containerd runs it."""
        cid = _container_id(client, agent_name, "agent")
        if not cid or cid == agent_cid or not withkubeacc.ready_pod(client, "kubeacc-agent-"):
            return None
        return cid if _running_tasks(tb).get(cid) == "RUNNING" else None

    eventually(restarted, 180, "the agent's container restarted and running in containerd")
    pod = client.get(Pod, agent_name, namespace=NS)
    assert pod.status is not None and pod.status.containerStatuses is not None
    restarts = {st.name: st.restartCount for st in pod.status.containerStatuses}
    assert restarts == {"agent": 1, "lifecycle": 0}
    assert running_container(client, "app", "work") == workload_container
    assert claim.metadata.uid in json.dumps(
        [p.read_text() for p in (tmp_path / "state").rglob("*.json")]
    )
    client.create(one_gpu_claim("gpu2", "work"))
    client.create(workload("app2", "work", claim="gpu2"))
    wait_running(client, "app2", "work")
    client.delete(Namespace, "work")

    # helm upgrade to GPUs through the device plugin with CDI names: the rolled agent pod
    # registers with the kubelet's device manager, and a pod asking for kubeacc.io/gpu gets its
    # GPU the same way (KUBEACC_DEVICE is set only by the CDI spec).
    upgraded = withkubeacc.chart_values(tb.kubelet, host, tmp_path, nvml=False)
    upgraded.update({"modes": {"gpu": "device-plugin"}, "devicePlugin": {"cdi": True}})
    kubeacc.upgrade(upgraded)

    def allocatable() -> str | None:
        status = client.get(Node, NODE).status
        count = ((status.allocatable if status else None) or {}).get("kubeacc.io/gpu", "0")
        return count if count != "0" else None

    assert eventually(allocatable, 180, "kubeacc.io/gpu allocatable") == "8"
    client.create(Namespace(metadata=ObjectMeta(name="work-dp")))
    client.create(workload("dp", "work-dp", gpus=1))

    def dp_listing() -> str:
        text = tb.kubelet.container_log("work-dp", "dp", "app")
        return text if "END-OF-LISTING" in text else ""

    got = Seen(eventually(dp_listing, 120, "the device-plugin workload's output"))
    (unit,) = got.env["ACCELERATOR_UNITS"].split(",")
    assert got.env["KUBEACC_DEVICE"] == unit
    (gpu,) = got.char_devices(r"/dev/nvidia\d+")
    assert got.dev[gpu][1] == null_numbers()
    client.delete(Namespace, "work-dp")

    # helm uninstall: the clean-up Job runs (in a container too), nothing of kube-acc is left.
    helm("uninstall", "kubeacc", "-n", NS, "--wait", "--timeout=4m")
    # helm leaves hooks it ran on uninstall: the last `helm test` Pod goes as docs/install.md says
    kubectl = subprocess.run(
        [*tb.kubectl(), "-n", NS, "delete", "pod", "kubeacc-status-test"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert kubectl.returncode == 0, kubectl.stderr
    eventually(lambda: not _slices(client), 120, "the agent's ResourceSlices gone")
    eventually(
        lambda: withkubeacc.pod_with_prefix(client, "kubeacc-") is None, 120, "kube-acc's pods gone"
    )

    def agent_containers_gone() -> bool:
        return KUBEACC_IMAGE not in _container_images(tb).values()

    eventually(agent_containers_gone, 120, "kube-acc's containers removed from containerd")
