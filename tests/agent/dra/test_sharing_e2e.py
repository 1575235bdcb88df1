"""Memory-shared GPUs on the testbed: the real scheduler puts several claims on one GPU until its
``kubeacc.io/memory`` runs out, the real kubelet prepares each share as its own CDI device with
the share's limits in its environment, and deleting one pod unprepares only its share."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.agent.podresources import PodResourcesClient
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.records import ContainerRecord

from ...nodestack import claim_pod, unschedulable
from ...testbed.helpers import eventually
from .agentproc import AgentProcess, plan_json

pytestmark = pytest.mark.cluster

#: The one GPU the agent shares (``--memory-shared pci=...``); the other seven stay whole.
SHARED_BDF = "0000:1b:00.0"
SHARED = "gpu-0000-1b-00-0"
#: "20 GB of an 80 GB H100": the synthetic H100 has 81559 MiB (85.5 GB), so four 20 GB shares
#: fit (each rounded up to whole MiB, 19074 MiB) and a fifth does not.
SHARE = "20G"
SHARE_MIB = 19074
#: Four compute shares of 20 % leave cores to spare: memory alone decides.
CORES = "20"
SHARED_ARGS = [f"--memory-shared=pci={SHARED_BDF}"]


@pytest.fixture
def agent(testbed: Testbed, tmp_path: Path) -> Iterator[AgentProcess]:
    host = profiles.build("dgx-h100", tmp_path / "host")
    a = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    a.start(extra=SHARED_ARGS)
    try:
        a.wait_registered()
        yield a
    finally:
        a.stop()


def shared_claim(name: str, ns: str) -> Any:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.kubeacc.io",
            "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
            "capacity": {"requests": {"kubeacc.io/memory": SHARE, "kubeacc.io/cores": CORES}},
        },
    }
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [request]}},
        }
    )


def running(client: Client, name: str, ns: str) -> bool:
    pod = client.get(Pod, name, namespace=ns)
    return bool(pod.status and pod.status.phase == "Running")


def cdi_env(cdi_dir: Path, record: ContainerRecord) -> dict[str, str]:
    """The environment a CDI runtime gives the container: each named device's spec edits."""
    env: dict[str, str] = {}
    for qualified in record.cdi_devices:
        name = qualified.split("=", 1)[1]
        (spec_file,) = [
            p
            for p in cdi_dir.glob("kubeacc.io-claim_*.json")
            if any(d["name"] == name for d in json.loads(p.read_text())["devices"])
        ]
        spec = json.loads(spec_file.read_text())
        (dev,) = [d for d in spec["devices"] if d["name"] == name]
        for edits in (spec["containerEdits"], dev["containerEdits"]):
            env.update(kv.split("=", 1) for kv in edits.get("env", []))
    return env


def test_four_shares_on_one_gpu_fifth_pending_unprepare_one_leaves_three(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    def shared_entry() -> dict[str, Any] | None:
        for s in kube_client.list(
            ResourceSlice, fields={"spec.nodeName": testbed.node_name, "spec.driver": DRIVER_NAME}
        ):
            for d in as_dict(s)["spec"].get("devices") or []:
                if d["name"] == SHARED and d.get("allowMultipleAllocations"):
                    return dict(d)
        return None

    entry = eventually(shared_entry, 60, "the shared GPU in our slice")
    assert entry["capacity"]["kubeacc.io/memory"]["requestPolicy"]["validRange"]["step"] == "1Mi"
    assert entry["capacity"]["kubeacc.io/cores"]["value"] == "100"

    # One after the other: kube-scheduler v1.36.3 counts a share's capacity twice for a moment
    # (the claim is already in its assume cache and still in flight), and a share of the same
    # GPU tried in that moment waits for the next event or the 5-minute flush (docs/sharing.md,
    # "A scheduler race"). The capacity arithmetic this test checks is the same either way.
    pods = [f"share-{i}" for i in range(4)]
    for name in pods:
        kube_client.create(shared_claim(name, namespace))
        kube_client.create(claim_pod(name, namespace, name))
        eventually(lambda n=name: running(kube_client, n, namespace), 90, f"{name} Running")

    uids: dict[str, str] = {}
    shares: dict[str, str] = {}
    for name in pods:
        claim = as_dict(kube_client.get(ResourceClaim, name, namespace=namespace))
        uids[name] = claim["metadata"]["uid"]
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["device"] == SHARED
        assert result["consumedCapacity"] == {
            "kubeacc.io/memory": f"{SHARE_MIB}Mi",
            "kubeacc.io/cores": CORES,
        }
        shares[name] = result["shareID"]
    assert len(set(shares.values())) == 4

    for name in pods:
        (rec,) = testbed.kubelet.container_records(namespace=namespace, pod=name)
        assert rec.cdi_devices == (f"kubeacc.io/claim={uids[name]}-{SHARED}-{shares[name]}",)
        env = cdi_env(agent.cdi_dir, rec)
        assert env["ACCELERATOR_UNITS"] == SHARED_BDF
        assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == str(SHARE_MIB)
        assert env["KUBEACC_DEVICE_CORES_LIMIT"] == CORES
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={SHARE_MIB}M"
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == CORES
    # The kubelet took each share's ID from our answer (its pod-resources API reports it).
    held = {
        pod.name: [
            (r.device_name, r.share_id)
            for c in pod.containers
            for d in c.dynamic_resources
            for r in d.claim_resources
        ]
        for pod in PodResourcesClient(testbed.kubelet.pod_resources_socket).list()
        if pod.namespace == namespace
    }
    assert held == {n: [(SHARED, shares[n])] for n in pods}
    ckpt = agent.checkpoint_claims()
    assert {u: [d["share_id"] for d in c["devices"]] for u, c in ckpt.items()} == {
        uids[n]: [shares[n]] for n in pods
    }

    # The fifth share does not fit: the scheduler says so, and so does the planner.
    kube_client.create(shared_claim("share-4", namespace))
    kube_client.create(claim_pod("share-4", namespace, "share-4"))
    eventually(lambda: unschedulable(kube_client, "share-4", namespace), 60, "share-4 refused")
    plan = plan_json(testbed, namespace)
    assert plan.returncode == 1, plan.stderr
    (verdict,) = [p for p in json.loads(plan.stdout) if p["claim"].endswith("share-4")]
    assert not verdict["allocated"]
    why = json.dumps(verdict["explanation"])
    assert "1 with kubeacc.io/cores >= 20, 0 with kubeacc.io/memory >= " in why

    # Deleting one pod unprepares its share only (the pending fifth goes first, so that the
    # freed memory is not handed to it).
    kube_client.delete(Pod, "share-4", namespace=namespace)
    kube_client.delete(ResourceClaim, "share-4", namespace=namespace)
    kept = {n: uids[n] for n in pods[1:]}
    specs = {u: (agent.cdi_dir / f"kubeacc.io-claim_{u}.json").read_bytes() for u in kept.values()}
    kube_client.delete(Pod, pods[0], namespace=namespace)
    eventually(
        lambda: set(agent.checkpoint_claims()) == set(kept.values()), 60, "one share unprepared"
    )
    assert agent.spec_uids() == set(kept.values())
    for uid, data in specs.items():
        assert (agent.cdi_dir / f"kubeacc.io-claim_{uid}.json").read_bytes() == data
    assert all(running(kube_client, n, namespace) for n in kept)


def _restart(agent: AgentProcess, pause_at: str | None = None, kill: bool = True) -> None:
    if kill:
        agent.kill()
    else:
        agent.stop()
    agent.start(pause_at=pause_at, extra=SHARED_ARGS)
    agent.wait_registered(90)


def _shares(agent: AgentProcess) -> dict[str, list[str | None]]:
    return {u: [d["share_id"] for d in c["devices"]] for u, c in agent.checkpoint_claims().items()}


def test_agent_killed_in_share_prepare_and_unprepare_recovers_each_share(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    def share_of(name: str) -> tuple[str, str]:
        claim = as_dict(kube_client.get(ResourceClaim, name, namespace=namespace))
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        return claim["metadata"]["uid"], result["shareID"]

    kube_client.create(shared_claim("a", namespace))
    kube_client.create(claim_pod("a", namespace, "a"))
    eventually(lambda: running(kube_client, "a", namespace), 90, "a Running")
    uid_a, share_a = share_of("a")

    # Killed after the second share's CDI spec was written, before its checkpoint entry.
    _restart(agent, "prepare-after-cdi", kill=False)
    kube_client.create(shared_claim("b", namespace))
    kube_client.create(claim_pod("b", namespace, "b"))
    assert agent.wait_paused() == "prepare-after-cdi"
    uid_b, share_b = share_of("b")
    assert agent.spec_uids() == {uid_a, uid_b}
    assert _shares(agent) == {uid_a: [share_a]}
    _restart(agent)
    eventually(lambda: running(kube_client, "b", namespace), 120, "b Running after restart")
    assert _shares(agent) == {uid_a: [share_a], uid_b: [share_b]}
    (rec,) = testbed.kubelet.container_records(namespace=namespace, pod="b")
    assert rec.cdi_devices == (f"kubeacc.io/claim={uid_b}-{SHARED}-{share_b}",)

    # Killed after the checkpoint forgot share b, before its spec was deleted.
    spec_a = (agent.cdi_dir / f"kubeacc.io-claim_{uid_a}.json").read_bytes()
    _restart(agent, "unprepare-after-checkpoint", kill=False)
    kube_client.delete(Pod, "b", namespace=namespace)
    assert agent.wait_paused() == "unprepare-after-checkpoint"
    _restart(agent)
    eventually(lambda: agent.spec_uids() == {uid_a}, 90, "share b's spec gone")
    assert _shares(agent) == {uid_a: [share_a]}
    assert (agent.cdi_dir / f"kubeacc.io-claim_{uid_a}.json").read_bytes() == spec_a
    assert running(kube_client, "a", namespace)
    assert agent.stray_files() == []
    assert "Traceback" not in agent.log()
