"""The driver end to end on the testbed: the real scheduler allocates from our slices, the real
kubelet finds the plugin through its plugins_registry, prepares the claim, runs the pod with
our CDI devices and unprepares when the pod goes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1
from kubeacc.node.kubeletapi import dra_v1beta1_pb2 as v1beta1
from kubeacc.node.kubeletapi import drahealth_v1_pb2 as hpb
from kubeacc.node.kubeletapi import drahealth_v1alpha1_pb2 as hpb_alpha
from kubeacc.synthetic import profiles
from kubeacc.synthetic.tools.hoststate import read_calls
from kubeacc.testbed import Testbed
from kubeacc.testbed.versions import LANE
from tests.kubeletclient import dra_v1_pb2_grpc as v1_grpc
from tests.kubeletclient import dra_v1beta1_pb2_grpc as v1beta1_grpc
from tests.kubeletclient import drahealth_v1_pb2_grpc as hpb_grpc
from tests.kubeletclient import drahealth_v1alpha1_pb2_grpc as hpb_alpha_grpc

from ...nodestack import claim_pod as pod_obj
from ...testbed.helpers import eventually
from .agentproc import AgentProcess, registered_agent

pytestmark = pytest.mark.cluster


@pytest.fixture
def agent(testbed: Testbed, tmp_path: Path) -> Iterator[AgentProcess]:
    """``kubeacc agent`` for the kubelet's node, on a synthetic 8-GPU server."""
    with registered_agent(testbed, profiles.build("dgx-h100", tmp_path / "host"), tmp_path) as a:
        yield a


def claim_obj(name: str, ns: str, spec: dict[str, Any]) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
    )


def one_gpu(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}]}
    }
    spec["devices"].update(extra or {})
    return spec


def running(client: Client, name: str, ns: str) -> bool:
    pod = client.get(Pod, name, namespace=ns)
    return bool(pod.status and pod.status.phase == "Running")


def gone(client: Client, name: str, ns: str) -> bool:
    return not any(p.metadata.name == name for p in client.list(Pod, namespace=ns))


def wait_slices(client: Client, node: str) -> list[ResourceSlice]:
    return eventually(
        lambda: list(
            client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME})
        ),
        what="our ResourceSlices",
    )


def test_pod_runs_with_our_cdi_devices_and_unprepares(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    slices = wait_slices(kube_client, testbed.node_name)
    # 7 whole GPUs + GPU 7's three fixed MIG instances (it is not whole) + 8 NICs; no VFs
    # (published only with --dra-publish vf)
    assert sum(len(s.spec.devices or []) for s in slices) == 18
    cfg = {
        "config": [
            {
                "requests": ["gpu"],
                "opaque": {
                    "driver": DRIVER_NAME,
                    "parameters": {
                        "apiVersion": "kubeacc.io/v1alpha1",
                        "kind": "GpuConfig",
                        "sharing": {"strategy": "TimeSlicing", "timeSlice": "Short"},
                        "env": {"MY_SETTING": "on"},
                    },
                },
            }
        ]
    }
    kube_client.create(claim_obj("gpu", namespace, one_gpu(cfg)))
    kube_client.create(pod_obj("app", namespace, "gpu"))
    eventually(lambda: running(kube_client, "app", namespace), 90, "pod Running")

    claim = kube_client.get(ResourceClaim, "gpu", namespace=namespace)
    uid = claim.metadata.uid
    (result,) = claim.status.allocation.devices.results
    assert result.driver == DRIVER_NAME
    assert result.pool == testbed.node_name
    assert result.device.startswith("gpu-")

    (rec,) = testbed.kubelet.container_records(namespace=namespace, pod="app")
    assert rec.cdi_devices == (f"kubeacc.io/claim={uid}-{result.device}",)
    assert agent.spec_uids() == {uid}
    ckpt = agent.checkpoint_claims()
    assert list(ckpt) == [uid]
    assert ckpt[uid]["config"][result.device]["kind"] == "GpuConfig"
    spec = (agent.cdi_dir / f"kubeacc.io-claim_{uid}.json").read_text()
    assert "ACCELERATOR_UNITS=0000:" in spec
    assert "KUBEACC_GPU_TIMESLICE=Short" in spec
    assert "MY_SETTING=on" in spec
    # time-slicing applied on the GPU (docs/sharing.md): compute mode DEFAULT, time slice 1
    applied = [(c["tool"], c["args"]) for c in read_calls(agent.host_root)]
    assert applied == [("nvml", [0]), ("nvidia-smi", [1])]

    kube_client.delete(Pod, "app", namespace=namespace)
    eventually(lambda: gone(kube_client, "app", namespace), 90, "pod deleted")
    eventually(lambda: not agent.checkpoint_claims(), 30, "unprepared", log=agent.log)
    # ... undone before the claim was forgotten (docs/sharing.md): the time slice and compute
    # mode found before are back once the checkpoint no longer holds the claim
    undone = [(c["tool"], c["args"]) for c in read_calls(agent.host_root)][2:]
    assert undone == [("nvidia-smi", [0]), ("nvml", [0])], agent.log()[-3000:]
    eventually(lambda: not agent.spec_uids(), 30, "CDI spec removed", log=agent.log)


def test_a_running_pods_device_stays_healthy_in_its_status_past_the_kubelets_timeout(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    """The kubelet calls a device it has not heard of for 30 s Unknown in the pod's status
    (ResourceHealthStatus, beta and on since 1.36); the agent sends its health again before.
    The stream is in the newest health API the kubelet knows: v1 from 1.37, v1alpha1 in 1.36."""
    kube_client.create(claim_obj("gpu", namespace, one_gpu()))
    kube_client.create(pod_obj("app", namespace, "gpu"))
    eventually(lambda: running(kube_client, "app", namespace), 90, "pod Running")

    def health() -> list[str]:
        pod = kube_client.get(Pod, "app", namespace=namespace)
        return [
            r.health
            for cs in (pod.status.containerStatuses or [])
            if pod.status
            for st in cs.allocatedResourcesStatus or []
            for r in st.resources or []
        ]

    eventually(
        lambda: health() == ["Healthy"],
        60,
        "the device Healthy in the pod's status",
        log=lambda: f"the pod's status reads {health()}",
    )
    # past the kubelet's timeout and a few of its pod status syncs (10 s in the testbed)
    seen = set()
    deadline = time.monotonic() + 55
    while time.monotonic() < deadline:
        seen.update(health())
        time.sleep(2)
    assert seen == {"Healthy"}, agent.log()[-2000:]
    opened = {
        v: agent.log().count(f"kubelet opened the resource health stream ({v}.DRAResourceHealth)")
        for v in ("v1", "v1alpha1")
    }
    chosen = "v1alpha1" if LANE.minor == "1.36" else "v1"
    assert opened[chosen] >= 1 and sum(opened.values()) == opened[chosen], opened


def _call_prepare(agent: AgentProcess, claims: list[tuple[str, str, str]], beta: bool = False):  # type: ignore[no-untyped-def]
    sock = agent.kubelet_root / "plugins" / DRIVER_NAME / "dra.sock"
    with grpc.insecure_channel(f"unix://{sock}") as ch:
        if beta:
            req_b = v1beta1.NodePrepareResourcesRequest(
                claims=[v1beta1.Claim(namespace=n, name=m, uid=u) for n, m, u in claims]
            )
            return v1beta1_grpc.DRAPluginStub(ch).NodePrepareResources(req_b, timeout=10)
        req = v1.NodePrepareResourcesRequest(
            claims=[v1.Claim(namespace=n, name=m, uid=u) for n, m, u in claims]
        )
        return v1_grpc.DRAPluginStub(ch).NodePrepareResources(req, timeout=10)


def test_unknown_foreign_and_bad_claims_get_per_claim_errors(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    wait_slices(kube_client, testbed.node_name)
    # a claim allocated (by hand, through the status subresource) from another node's pool
    kube_client.create(claim_obj("foreign", namespace, one_gpu()))
    foreign = kube_client.get(ResourceClaim, "foreign", namespace=namespace)
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": DRIVER_NAME,
                        "pool": "some-other-node",
                        "device": "gpu-0000-1b-00-0",
                    }
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["other"]}
                        ]
                    }
                ]
            },
        }
    }
    kube_client.patch(
        ResourceClaim.Status,
        "foreign",
        {"status": status},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    unallocated = "pending"
    kube_client.create(claim_obj(unallocated, namespace, one_gpu()))
    pending_uid = kube_client.get(ResourceClaim, unallocated, namespace=namespace).metadata.uid
    ghost_uid = str(uuid.uuid4())
    wrong_uid = str(uuid.uuid4())
    for beta in (False, True):
        resp = _call_prepare(
            agent,
            [
                (namespace, "ghost", ghost_uid),
                (namespace, "foreign", foreign.metadata.uid),
                (namespace, unallocated, pending_uid),
                (namespace, unallocated, wrong_uid),
            ],
            beta=beta,
        )
        errs = {uid: r.error for uid, r in resp.claims.items()}
        assert len(errs) == 4
        assert "not found" in errs[ghost_uid]
        assert "pool 'some-other-node'" in errs[foreign.metadata.uid]
        assert "not allocated" in errs[pending_uid]
        assert "has UID" in errs[wrong_uid]
        assert all(not r.devices for r in resp.claims.values())
    assert agent.spec_uids() == set()
    assert agent.checkpoint_claims() == {}


def test_invalid_opaque_config_is_refused_per_claim(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    wait_slices(kube_client, testbed.node_name)
    bad = {
        "config": [
            {
                "opaque": {
                    "driver": DRIVER_NAME,
                    "parameters": {
                        "apiVersion": "kubeacc.io/v1alpha1",
                        "kind": "FpgaConfig",
                        "bitstream": {"name": "nic-offload", "digest": "md5:abc"},
                    },
                }
            }
        ]
    }
    kube_client.create(claim_obj("bad", namespace, one_gpu(bad)))
    kube_client.create(pod_obj("app", namespace, "bad"))
    uid = kube_client.get(ResourceClaim, "bad", namespace=namespace).metadata.uid

    def allocated() -> bool:
        c = kube_client.get(ResourceClaim, "bad", namespace=namespace)
        return bool(c.status and c.status.allocation)

    eventually(allocated, 60, "claim allocated")
    resp = _call_prepare(agent, [(namespace, "bad", uid)])
    err = resp.claims[uid].error
    assert "invalid FpgaConfig" in err
    assert "bitstream.digest" in err
    assert agent.spec_uids() == set()
    assert not running(kube_client, "app", namespace)


def test_health_stream_reports_every_device(
    testbed: Testbed, kube_client: Client, agent: AgentProcess
) -> None:
    """In both health API versions the agent serves (v1, v1alpha1), on the agent's socket."""
    sock = agent.kubelet_root / "plugins" / DRIVER_NAME / "dra.sock"
    for pb, pb_grpc in ((hpb, hpb_grpc), (hpb_alpha, hpb_alpha_grpc)):
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            stream = pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                pb.NodeWatchResourcesRequest(), timeout=10
            )
            first = next(iter(stream))
            stream.cancel()
        assert isinstance(first, pb.NodeWatchResourcesResponse)
        by_name = {d.device.device_name: d for d in first.devices}
        assert len(by_name) == 18  # as published: GPU 7 as its three MIG instances, no VFs
        assert {d.device.pool_name for d in first.devices} == {testbed.node_name}
        assert by_name["gpu-0000-1b-00-0"].health == pb.HEALTHY


def test_reregisters_and_republishes_after_kubelet_restart(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    wait_slices(kube_client, testbed.node_name)
    testbed.restart_kubelet()
    # the plugin watcher of the new kubelet finds our socket again ...
    agent.wait_log("kubelet registered plugin kubeacc.io", 60, count=2)
    # ... and the slices the new kubelet wiped at start are written again
    time.sleep(2)
    wait_slices(kube_client, testbed.node_name)
    kube_client.create(claim_obj("gpu", namespace, one_gpu()))
    kube_client.create(pod_obj("app", namespace, "gpu"))
    eventually(lambda: running(kube_client, "app", namespace), 90, "pod Running after restart")


def test_standard_numa_attribute_aligns_a_gpu_and_a_nic(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    """Every device with a known NUMA node carries ``resource.kubernetes.io/numaNode`` (the API
    server accepts it), equal to ``kubeacc.io/numaNode``; a claim for a GPU and a NIC with
    ``matchAttribute`` on it gets two devices of one NUMA node."""
    std = "resource.kubernetes.io/numaNode"
    numa: dict[str, int] = {}
    for s in wait_slices(kube_client, testbed.node_name):
        for d in s.spec.devices or []:
            attrs: dict[str, Any] = d.attributes or {}
            own = attrs["numaNode"]["int"]
            assert attrs.get(std, {"int": -1})["int"] == own, d.name
            numa[d.name] = own
    assert {n for n in numa.values()} == {0, 1}  # both NUMA nodes hold devices
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}},
        {"name": "nic", "exactly": {"deviceClassName": "nic.kubeacc.io"}},
    ]
    spec = {"devices": {"requests": requests, "constraints": [{"matchAttribute": std}]}}
    kube_client.create(claim_obj("aligned", namespace, spec))
    kube_client.create(pod_obj("aligned", namespace, "aligned"))
    eventually(lambda: running(kube_client, "aligned", namespace), 90, "pod Running")
    claim = kube_client.get(ResourceClaim, "aligned", namespace=namespace)
    gpu, nic = (r.device for r in claim.status.allocation.devices.results)
    assert gpu.startswith("gpu-") and nic.startswith("nic-")
    assert numa[gpu] == numa[nic]
