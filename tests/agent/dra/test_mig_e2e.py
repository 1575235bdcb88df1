"""MIG partitions on the testbed: partitions come only from their class (``mig.kubeacc.io``),
never as GPUs of ``gpu.kubeacc.io``; the real scheduler never puts a partition and the whole GPU
on one GPU (shared counters), the real kubelet's prepare creates the GPU and compute instance
through NVML and its unprepare destroys them (the synthetic NVML's call log shows it, in order),
and an agent killed between creating an instance and its checkpoint leaves no orphan."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.controller.controller import Controller
from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.mig_state import read_calls
from kubeacc.synthetic.nvmllib import SyntheticNVML
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import agent_cert_client, install_agent_access
from tests.crdfixtures import create_operation, running, wait_for

from ...nodestack import claim_pod, unschedulable
from ...testbed.helpers import eventually
from .agentproc import AgentProcess, plan_json, registered_agent
from .test_sharing_e2e import cdi_env
from .test_sharing_e2e import running as running_pod

pytestmark = pytest.mark.cluster

H100, A100 = "gpu-0000-01-00-0", "gpu-0000-02-00-0"
#: A CEL error on any device fails the claim's scheduling: guard the attribute with has().
PROFILE_3G = (
    'has(device.attributes["kubeacc.io"].migProfile) && '
    'device.attributes["kubeacc.io"].migProfile == "3g.40gb"'
)
WHOLE = '!has(device.attributes["kubeacc.io"].migProfile)'
GPU_CLASS, MIG_CLASS, ANY_CLASS = "gpu.kubeacc.io", "mig.kubeacc.io", "accelerator.kubeacc.io"
CREATE_GI = "nvmlDeviceCreateGpuInstanceWithPlacement"
CREATE_CI = "nvmlGpuInstanceCreateComputeInstance"
DESTROY_CI = "nvmlComputeInstanceDestroy"
DESTROY_GI = "nvmlGpuInstanceDestroy"


@pytest.fixture
def agent(testbed: Testbed, tmp_path: Path) -> Iterator[AgentProcess]:
    with registered_agent(testbed, profiles.build("mig-pair", tmp_path / "host"), tmp_path) as a:
        yield a


def gpu_claim(
    name: str, ns: str, cel: str | None = None, cls: str = GPU_CLASS, count: int = 1
) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if cel is not None:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    request = {"name": "gpu", "exactly": exactly}
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [request]}},
        }
    )


def allocated(client: Client, name: str, ns: str) -> tuple[str, str]:
    claim = as_dict(client.get(ResourceClaim, name, namespace=ns))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return claim["metadata"]["uid"], result["device"]


def calls(agent: AgentProcess) -> list[str]:
    return [c["call"] for c in read_calls(agent.host_root / ".synthetic")]


def mig_devices(agent: AgentProcess, gpu: int) -> list[dict[str, Any]]:
    lib = SyntheticNVML.from_file(str(agent.host_root / ".synthetic/nvml.json"))
    return lib.mig_view(gpu)[1]


def published(client: Client, node: str) -> tuple[set[str], int]:
    names: set[str] = set()
    counter_sets = 0
    for s in client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME}):
        spec = as_dict(s)["spec"]
        names.update(d["name"] for d in spec.get("devices") or [])
        counter_sets += len(spec.get("sharedCounters") or [])
    return names, counter_sets


def test_partition_and_whole_gpu_never_share_a_gpu_and_nvml_calls_in_order(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    eventually(
        lambda: published(kube_client, testbed.node_name)[1] == 2, 60, "two MIG counter sets"
    )
    names, _ = published(kube_client, testbed.node_name)
    assert {H100, A100, f"{H100}-mig-3g-40gb-4", f"{A100}-mig-7g-80gb-0"} <= names

    kube_client.create(gpu_claim("part", namespace, PROFILE_3G, MIG_CLASS))
    kube_client.create(claim_pod("part", namespace, "part"))
    eventually(lambda: running_pod(kube_client, "part", namespace), 90, "part Running")
    kube_client.create(gpu_claim("whole", namespace, WHOLE))
    kube_client.create(claim_pod("whole", namespace, "whole"))
    eventually(lambda: running_pod(kube_client, "whole", namespace), 90, "whole Running")

    part_uid, part_dev = allocated(kube_client, "part", namespace)
    _, whole_dev = allocated(kube_client, "whole", namespace)
    parent = part_dev.split("-mig-")[0]
    assert whole_dev in (H100, A100) and whole_dev != parent

    # The partition's container: the MIG device's nodes and its UUID, from the instance made.
    (index,) = [i for i, g in enumerate((H100, A100)) if g == parent]
    (made,) = mig_devices(agent, index)
    assert made["profile"] == "3g.40gb"
    (rec,) = testbed.kubelet.container_records(namespace=namespace, pod="part")
    env = cdi_env(agent.cdi_dir, rec)
    assert env["NVIDIA_VISIBLE_DEVICES"] == made["uuid"]
    assert env["KUBEACC_MIG_PROFILE"] == "3g.40gb"
    spec = json.loads((agent.cdi_dir / f"kubeacc.io-claim_{part_uid}.json").read_text())
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes[0] == f"/dev/nvidia{index}" and len(nodes) == 6
    assert all(n.startswith("/dev/nvidia-caps/nvidia-cap") for n in nodes[1:3])
    assert nodes[3:] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert calls(agent) == [CREATE_GI, CREATE_CI]  # the whole GPU needs no NVML call

    # Each GPU is taken (one whole, one partly): another whole-GPU claim cannot be allocated.
    kube_client.create(gpu_claim("whole-2", namespace, WHOLE))
    kube_client.create(claim_pod("whole-2", namespace, "whole-2"))
    eventually(lambda: unschedulable(kube_client, "whole-2", namespace), 60, "whole-2 refused")
    plan = plan_json(testbed, namespace)
    (verdict,) = [p for p in json.loads(plan.stdout) if p["claim"].endswith("whole-2")]
    assert not verdict["allocated"]  # the planner agrees, and says which counter ran out
    assert "shared counter" in json.dumps(verdict["explanation"]), verdict

    # Deleting the partition's pod destroys its compute, then its GPU instance; the GPU is
    # whole again and the waiting claim gets it.
    kube_client.delete(Pod, "part", namespace=namespace)
    eventually(lambda: part_uid not in agent.checkpoint_claims(), 90, "part unprepared")
    assert calls(agent) == [CREATE_GI, CREATE_CI, DESTROY_CI, DESTROY_GI]
    assert mig_devices(agent, index) == []
    eventually(lambda: running_pod(kube_client, "whole-2", namespace), 120, "whole-2 Running")
    assert allocated(kube_client, "whole-2", namespace)[1] == parent
    assert "Traceback" not in agent.log()


def test_gpu_class_gives_whole_gpus_only_never_partitions(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    """Two whole GPUs and 30+ partitions on the node: five GPUs of ``gpu.kubeacc.io`` are refused
    with a reason (the partitions are not GPUs), three devices of ``accelerator.kubeacc.io`` too
    (planner), two GPUs are the two whole GPUs, and a partition comes from ``mig.kubeacc.io``."""
    eventually(
        lambda: published(kube_client, testbed.node_name)[1] == 2, 60, "two MIG counter sets"
    )
    names, _ = published(kube_client, testbed.node_name)
    assert len([n for n in names if "-mig-" in n]) >= 5  # enough partitions to fill five

    kube_client.create(gpu_claim("five", namespace, count=5))
    kube_client.create(claim_pod("five", namespace, "five"))
    reason = eventually(lambda: unschedulable(kube_client, "five", namespace), 60, "five refused")
    assert "cannot allocate all claims" in reason, reason
    kube_client.create(gpu_claim("any3", namespace, cls=ANY_CLASS, count=3))  # planned only
    plan = plan_json(testbed, namespace)
    verdicts = {p["claim"].split("/")[-1]: p for p in json.loads(plan.stdout)}
    for claim, cls in (("five", GPU_CLASS), ("any3", ANY_CLASS)):
        assert not verdicts[claim]["allocated"], verdicts[claim]
        # the planner's reason: the node has two devices in the class, not five (or three)
        assert f"2 in class {cls}" in json.dumps(verdicts[claim]["explanation"]), verdicts[claim]
    kube_client.delete(Pod, "five", namespace=namespace)
    kube_client.delete(ResourceClaim, "five", namespace=namespace)

    kube_client.create(gpu_claim("two", namespace, count=2))
    kube_client.create(claim_pod("two", namespace, "two"))
    eventually(lambda: running_pod(kube_client, "two", namespace), 90, "two Running")
    claim = as_dict(kube_client.get(ResourceClaim, "two", namespace=namespace))
    got = {r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}
    assert got == {H100, A100}
    kube_client.delete(Pod, "two", namespace=namespace)
    kube_client.delete(ResourceClaim, "two", namespace=namespace)
    eventually(lambda: not agent.checkpoint_claims(), 90, "two unprepared")

    kube_client.create(gpu_claim("part", namespace, cls=MIG_CLASS))
    kube_client.create(claim_pod("part", namespace, "part"))
    eventually(lambda: running_pod(kube_client, "part", namespace), 90, "part Running")
    assert "-mig-" in allocated(kube_client, "part", namespace)[1]
    assert "Traceback" not in agent.log()


def test_agent_killed_between_create_and_checkpoint_leaves_no_orphan(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    eventually(
        lambda: published(kube_client, testbed.node_name)[1] == 2, 60, "two MIG counter sets"
    )
    agent.stop()
    agent.start(pause_at="prepare-after-mig")
    agent.wait_registered(90)
    kube_client.create(gpu_claim("part", namespace, PROFILE_3G, MIG_CLASS))
    kube_client.create(claim_pod("part", namespace, "part"))
    assert agent.wait_paused() == "prepare-after-mig"
    uid, dev = allocated(kube_client, "part", namespace)
    index = 0 if dev.startswith(H100) else 1
    (orphan,) = mig_devices(agent, index)  # made, not checkpointed, no CDI spec
    assert agent.checkpoint_claims() == {} and agent.spec_uids() == set()
    assert calls(agent) == [CREATE_GI, CREATE_CI]

    agent.kill()
    agent.start()
    agent.wait_registered(90)
    eventually(
        lambda: running_pod(kube_client, "part", namespace), 120, "part Running after restart"
    )
    # The restart destroyed the orphan; the kubelet's retry made the claim's instance anew.
    assert calls(agent) == [CREATE_GI, CREATE_CI, DESTROY_CI, DESTROY_GI, CREATE_GI, CREATE_CI]
    (made,) = mig_devices(agent, index)
    assert made["uuid"] != orphan["uuid"]
    assert set(agent.checkpoint_claims()) == {uid}
    (rec,) = testbed.kubelet.container_records(namespace=namespace, pod="part")
    assert cdi_env(agent.cdi_dir, rec)["NVIDIA_VISIBLE_DEVICES"] == made["uuid"]
    records = json.loads((agent.state_dir / "mig.json").read_text())["records"]
    assert [(r["claim"], r["device"]) for r in records] == [(uid, dev)]
    assert agent.stray_files() == []


def test_mig_mode_operation_waits_for_an_idle_gpu(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    agent: AgentProcess,
    kubeacc_crds: None,
    tmp_path: Path,
) -> None:
    """MigMode off: refused while a partition of the GPU is prepared (the Accelerator lists its
    claim), done with a GPU reset once the GPU is idle; the slice then has no partitions."""
    node = testbed.node_name
    client = testbed.client(field_manager="kubeacc-test")
    install_agent_access(client)
    lifecycle = LifecycleAgent(
        agent_cert_client(testbed, node, tmp_path / "lc"),
        node_name=node,
        host=SyntheticHost(agent.host_root, kernel=SyntheticKernel(agent.host_root)),
        bitstream_dir=tmp_path,
        interval=0.3,
    )
    ctl = Controller(
        testbed.client(field_manager="kubeacc-controller"),
        identity="mig-e2e",
        lease_namespace="default",
        lease_name=f"kubeacc-mig-{uuid.uuid4().hex[:5]}",
        interval=0.3,
        admin_namespaces=[ANY_NAMESPACE],
    )
    acc = f"{node}-{H100}"

    def users() -> list[Any]:
        try:
            obj = as_dict(client.get(Accelerator, acc))
        except ApiError:
            return []
        return list((obj.get("status") or {}).get("allocatedTo") or [])

    def finished(name: str) -> dict[str, Any] | None:
        obj = as_dict(client.get(AcceleratorOperation, name, namespace=namespace))
        status = obj.get("status") or {}
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    off = {"action": "MigMode", "targets": [acc], "migMode": {"enabled": False}}
    try:
        with running(lifecycle, ctl):
            wait_for("the H100's Accelerator", lambda: _exists(client, acc), timeout=60)
            part = (
                f'{PROFILE_3G} && device.attributes["kubeacc.io"].parentPciBusID == "0000:01:00.0"'
            )
            kube_client.create(gpu_claim("part", namespace, part, MIG_CLASS))
            kube_client.create(claim_pod("part", namespace, "part"))
            eventually(lambda: running_pod(kube_client, "part", namespace), 90, "part Running")
            wait_for("the claim in allocatedTo", users, timeout=60)

            create_operation(client, namespace, "off-busy", off)
            status = wait_for("off-busy done", lambda: finished("off-busy"), timeout=60)
            assert status["phase"] == "Failed"
            assert "part" in status["message"], status
            assert mig_mode(agent, 0) == [1, 1]

            kube_client.delete(Pod, "part", namespace=namespace)
            kube_client.delete(ResourceClaim, "part", namespace=namespace)
            eventually(lambda: not agent.checkpoint_claims(), 90, "part unprepared")
            eventually(lambda: not users(), 60, "the GPU idle")
            create_operation(client, namespace, "off-idle", off)
            status = wait_for("off-idle done", lambda: finished("off-idle"), timeout=60)
            assert status["phase"] == "Succeeded", status
            assert mig_mode(agent, 0) == [0, 0]
            assert calls(agent)[-2:] == ["nvmlDeviceSetMigMode", "reset"]
            # the agent rediscovers: the H100 is a plain GPU again, the A100 still partitioned
            eventually(
                lambda: (
                    not any(n.startswith(f"{H100}-mig-") for n in published(kube_client, node)[0])
                ),
                60,
                "the H100's partitions gone from the slice",
            )
            names, counter_sets = published(kube_client, node)
            assert H100 in names and f"{A100}-mig-7g-80gb-0" in names and counter_sets == 1
    finally:
        for a in client.list(Accelerator, labels={NODE_LABEL: node}):
            with contextlib.suppress(ApiError):
                client.delete(Accelerator, a.metadata.name if a.metadata else "")


def _exists(client: Client, name: str) -> bool:
    try:
        client.get(Accelerator, name)
    except ApiError:
        return False
    return True


def mig_mode(agent: AgentProcess, gpu: int) -> list[int]:
    lib = SyntheticNVML.from_file(str(agent.host_root / ".synthetic/nvml.json"))
    return list(lib.nvmlDeviceGetMigMode(lib.nvmlDeviceGetHandleByIndex(gpu)))
