"""An AcceleratorPolicy drives GPU sharing on the testbed: creating an MPS policy makes the node
agent publish the GPUs it selects as memory-shared, claims through the DeviceClass the controller
generates get shares served by the GPU's MPS control daemon, and deleting the policy makes the
GPUs whole again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.agent.dra.sharing.mps import MpsDaemons
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import AcceleratorPolicy, as_dict
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.tools.hoststate import read_calls
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_policy
from tests.hosts import discover
from tests.nodestack import (
    NodeStack,
    claim_pod,
    device_class_exists,
    node_stack,
    pod_phase,
    resource_claim,
)
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

POLICY = "h100-mps"
CLASS = f"{POLICY}.policy.kubeacc.io"


def share_claim(name: str, ns: str, cls: str, memory: str, cel: str | None = None) -> Any:
    exactly: dict[str, Any] = {
        "deviceClassName": cls,
        "capacity": {"requests": {"kubeacc.io/memory": memory}},
    }
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return resource_claim(name, ns, [{"name": "acc", "exactly": exactly}])


def running_share(
    client: Client, stack: NodeStack, name: str, ns: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Once the pod ``name`` runs: its claim's allocation result and its CDI device's env."""
    eventually(lambda: pod_phase(client, name, ns) == "Running", 120, f"pod {name} Running")
    claim = as_dict(client.get(ResourceClaim, name, namespace=ns))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    (device,) = stack.cdi_spec(claim["metadata"]["uid"])["devices"]
    env = dict(e.split("=", 1) for e in device["containerEdits"]["env"])
    return dict(result), env


def shared_devices(client: Client, node: str) -> set[str]:
    out = set()
    for s in client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME}):
        for d in as_dict(s)["spec"].get("devices") or []:
            if d.get("allowMultipleAllocations"):
                out.add(d["name"])
    return out


@pytest.fixture
def no_daemon_left(tmp_path: Path) -> Iterator[None]:
    """Stop the MPS daemons a failed test left (the agent's state dir is tmp_path/state)."""
    yield
    daemons = MpsDaemons(SyntheticHost(tmp_path / "host"), tmp_path / "state" / "mps")
    for bus_id in daemons.running():
        daemons.stop(bus_id, "")


@pytest.mark.usefixtures("no_daemon_left")
def test_an_mps_policy_shares_the_gpus_it_selects(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    with node_stack(testbed, tmp_path, "dgx-h100") as stack:
        gpus = [d for d in discover(stack.host).devices if d.type.value == "gpu"]
        not_mig = {d.name for d in gpus if not d.partitions}
        model = gpus[0].model
        eventually(lambda: stack.slice_device(gpus[0].name), 60, "our slice")
        assert shared_devices(kube_client, stack.node) == set()

        put_policy(
            kube_client,
            POLICY,
            {"selector": {"types": ["gpu"], "models": [model]}, "sharing": {"mode": "MPS"}},
        )
        eventually(lambda: shared_devices(kube_client, stack.node) == not_mig, 60, "shared GPUs")
        eventually(lambda: device_class_exists(kube_client, CLASS), 30, f"DeviceClass {CLASS}")

        for name in ("infer-a", "infer-b"):
            kube_client.create(share_claim(name, namespace, CLASS, "20G"))
            kube_client.create(claim_pod(name, namespace, name))
        used: set[str] = set()
        for name in ("infer-a", "infer-b"):
            result, env = running_share(kube_client, stack, name, namespace)
            assert result["shareID"] and result["device"] in not_mig
            used.add(result["device"])
            assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
            assert env["KUBEACC_SHARING_POLICY"] == POLICY
            assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == "19074"
        starts = [c for c in read_calls(stack.host) if (c["tool"], c["call"]) == ("mps", "start")]
        assert len(starts) == len(used)  # one daemon per GPU in use

        daemons = MpsDaemons(SyntheticHost(stack.host), stack.agent.state_dir / "mps")
        for name in ("infer-a", "infer-b"):
            kube_client.delete(Pod, name, namespace=namespace)
        eventually(lambda: daemons.running() == {}, 90, "the daemons stopped with the last share")
        kube_client.delete(AcceleratorPolicy, POLICY)
        eventually(lambda: shared_devices(kube_client, stack.node) == set(), 60, "whole GPUs")


def test_a_memory_shared_policy_shares_kunlun_xpus(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    with node_stack(testbed, tmp_path, "kunlun-xpu") as stack:
        xpus = {d.name for d in discover(stack.host).devices if d.type.value == "xpu"}
        put_policy(
            kube_client,
            "xpu-shared",
            {"selector": {"types": ["xpu"]}, "sharing": {"mode": "MemoryShared"}},
        )
        eventually(lambda: shared_devices(kube_client, stack.node) == xpus, 60, "shared XPUs")
        cls = "xpu-shared.policy.kubeacc.io"
        eventually(lambda: device_class_exists(kube_client, cls), 30, f"DeviceClass {cls}")
        devices = set()
        # All on one XPU: 3 x 5 GiB of its 16 GiB, one pod after the other. Created together,
        # kube-scheduler 1.37.2 can count a share twice for a moment (in its claim cache and
        # still in flight) and park the third pod for its 5-minute unschedulable flush; see
        # docs/sharing.md, "A scheduler race".
        for name in [f"xpu-{i}" for i in range(3)]:
            one = 'device.attributes["kubeacc.io"].index == 0'
            kube_client.create(share_claim(name, namespace, cls, "5Gi", one))
            kube_client.create(claim_pod(name, namespace, name))
            result, env = running_share(kube_client, stack, name, namespace)
            devices.add(result["device"])
            assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == "5120"
            assert not [k for k in env if k.startswith("CUDA_")]
        assert len(devices) == 1  # three shares of one XPU
