"""kube-acc's devices reaching real containers through containerd's CDI injection.

The node runs containerd + runc (``runtime_testbed``); the node agent and the device plugin
run on a synthetic 8-GPU host (``--host-root``) whose device nodes are real character devices
made with mknod under the node's device root (``--device-root``). The workload containers
print their environment and list /dev: nothing in the pod spec names a device or sets
``ACCELERATOR_UNITS``; both come only from the CDI specs the agent wrote, applied by
containerd.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node import cdi as dra_cdi
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.images import WORKLOAD_IMAGE
from tests.agent.dra.agentproc import AgentProcess
from tests.hosts import discover
from tests.kubeaccproc import kubeacc_process
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

#: The workload: its environment, a separator, every node under /dev, a marker, then it stays.
SCRIPT = "env; echo ===; ls -lR /dev; echo END-OF-LISTING; sleep 3600"


@pytest.fixture
def host(runtime_testbed: Testbed, tmp_path: Path) -> Path:
    """A synthetic 8-GPU server whose device nodes exist for real under the device root."""
    root = profiles.build("dgx-h100", tmp_path / "host")
    nodes = sorted({n for d in discover(root).devices for n in d.device_nodes})
    runtime_testbed.kubelet.mknod(nodes)
    return root


@pytest.fixture
def agent(runtime_testbed: Testbed, host: Path, tmp_path: Path) -> Iterator[AgentProcess]:
    kubelet = runtime_testbed.kubelet
    a = AgentProcess(
        kubelet.node_name, host, runtime_testbed.kubeconfig, kubelet.root_dir, tmp_path
    )
    a.cdi_dir = kubelet.cdi_dir  # the directory containerd reads its CDI specs from
    a.start(extra=[f"--device-root={kubelet.device_root}"])
    try:
        a.wait_registered()
        yield a
    finally:
        a.stop()


def workload(name: str, ns: str, claim: str | None = None, gpus: int = 0) -> Any:
    container: dict[str, Any] = {
        "name": "app",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", SCRIPT],
    }
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if claim:
        spec["resourceClaims"] = [{"name": "acc", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "acc"}]}
    if gpus:
        container["resources"] = {"limits": {"kubeacc.io/gpu": str(gpus)}}
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }
    )


def gpus_and_nic_claim(name: str, ns: str) -> Any:
    """Two GPUs and a NIC physical function behind one PCIe root (as in the demo's claims)."""
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.kubeacc.io", "count": 2},
                        },
                        {
                            "name": "nic",
                            "exactly": {
                                "deviceClassName": "nic.kubeacc.io",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": '!("sriovVF" in '
                                            'device.attributes["kubeacc.io"])'
                                        }
                                    }
                                ],
                            },
                        },
                    ],
                    "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
                }
            },
        }
    )


def one_gpu_claim(name: str, ns: str) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}]
                }
            },
        }
    )


class Seen:
    """What a workload container printed: its environment and its /dev."""

    def __init__(self, text: str) -> None:
        env_part, _, dev_part = text.partition("===\n")
        self.env = dict(line.split("=", 1) for line in env_part.splitlines() if "=" in line)
        #: path -> (type letter, "major,minor" for device nodes)
        self.dev: dict[str, tuple[str, str]] = {}
        directory = "/dev"
        for line in dev_part.splitlines():
            if line.endswith(":") and line.startswith("/dev"):
                directory = line[:-1]
                continue
            m = re.match(r"^([cbdlps-])\S+\s+\d+\s+\S+\s+\S+\s+(\d+),\s+(\d+)\s.*\s(\S+)$", line)
            if m:
                self.dev[f"{directory}/{m.group(4)}"] = (m.group(1), f"{m.group(2)},{m.group(3)}")

    def char_devices(self, pattern: str) -> set[str]:
        return {p for p, (kind, _) in self.dev.items() if kind == "c" and re.fullmatch(pattern, p)}


def seen(tb: Testbed, ns: str, pod: str) -> Seen:
    """Wait for the container's listing to be complete and parse it."""

    def complete() -> str:
        text = tb.kubelet.container_log(ns, pod, "app")
        return text if "END-OF-LISTING" in text else ""

    return Seen(eventually(complete, 60, f"the output of {pod}"))


def running_container(client: Client, name: str, ns: str) -> str | None:
    """The running container's id (None until it runs)."""
    pod = client.get(Pod, name, namespace=ns)
    for st in (pod.status.containerStatuses if pod.status else None) or []:
        if st.state and st.state.running:
            return st.containerID
    return None


def wait_running(client: Client, name: str, ns: str, timeout: float = 120) -> str:
    """Wait until the pod's container runs; fail with what the kubelet says if it does not."""
    try:
        return eventually(lambda: running_container(client, name, ns), timeout, f"{name} running")
    except AssertionError as exc:
        pod = client.get(Pod, name, namespace=ns)
        waiting = [
            f"{st.state.waiting.reason}: {st.state.waiting.message}"
            for st in (pod.status.containerStatuses if pod.status else None) or []
            if st.state and st.state.waiting
        ]
        raise AssertionError(f"{exc}; container waiting: {waiting}") from None


def null_numbers() -> str:
    rdev = os.stat("/dev/null").st_rdev
    return f"{os.major(rdev)},{os.minor(rdev)}"


def bus_ids(client: Client, claim: ResourceClaim, node: str) -> dict[str, str]:
    """Allocated device name -> its pciBusID attribute in our ResourceSlices."""
    assert claim.status is not None and claim.status.allocation is not None
    names = [r.device for r in claim.status.allocation.devices.results]
    attrs: dict[str, str] = {}
    for s in client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME}):
        for d in s.spec.devices or []:
            if d.name in names:
                attr = (d.attributes or {})["resource.kubernetes.io/pciBusID"]
                attrs[d.name] = str(attr["string"] if isinstance(attr, dict) else attr.string)
    assert sorted(attrs) == sorted(names)
    return attrs


def env_suffix(device: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", device).upper()


def test_dra_claim_devices_come_in_through_containerd_cdi(
    runtime_testbed: Testbed, runtime_namespace: str, agent: AgentProcess
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    client.create(gpus_and_nic_claim("acc", ns))
    client.create(workload("app", ns, claim="acc"))
    wait_running(client, "app", ns)
    got = seen(tb, ns, "app")

    claim = client.get(ResourceClaim, "acc", namespace=ns)
    buses = bus_ids(client, claim, tb.node_name)
    assert len(buses) == 3
    assert sorted(got.env["ACCELERATOR_UNITS"].split(",")) == sorted(buses.values())
    for device, bus in buses.items():
        assert got.env[f"KUBEACC_DEVICE_{env_suffix(device)}"] == bus
    assert got.env["KUBEACC_CLAIM"] == f"{ns}/acc"

    # Exactly the two allocated GPUs' nodes, the control nodes, and the NIC's verbs device:
    # real character devices with the numbers of the nodes the test made (not the host's /dev).
    gpus = got.char_devices(r"/dev/nvidia\d+")
    assert len(gpus) == 2
    assert got.char_devices(r"/dev/nvidiactl") == {"/dev/nvidiactl"}
    assert len(got.char_devices(r"/dev/infiniband/uverbs\d+")) == 1
    for path in gpus | {"/dev/nvidiactl"}:
        assert got.dev[path][1] == null_numbers()
    # ... and they are the ones the agent's CDI spec names.
    assert claim.metadata is not None and claim.metadata.uid
    spec = json.loads(dra_cdi.spec_path(tb.kubelet.cdi_dir, claim.metadata.uid).read_text())
    spec_nodes = {
        n["path"] for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])
    }
    assert gpus <= spec_nodes
    for n in (n for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])):
        assert n["hostPath"] == str(tb.kubelet.device_root / n["path"].lstrip("/"))
        assert stat.S_ISCHR(os.stat(n["hostPath"]).st_mode)


def test_cdi_spec_naming_a_missing_device_node_fails_with_containerds_error(
    runtime_testbed: Testbed, runtime_namespace: str, host: Path, tmp_path: Path
) -> None:
    """containerd really applies the spec: a device node that is not where the spec says
    stops the container with containerd's CDI error in the pod's status and events."""
    tb, ns = runtime_testbed, runtime_namespace
    kubelet = tb.kubelet
    empty = tmp_path / "no-devices"
    empty.mkdir()
    a = AgentProcess(kubelet.node_name, host, tb.kubeconfig, kubelet.root_dir, tmp_path)
    a.cdi_dir = kubelet.cdi_dir
    a.start(extra=[f"--device-root={empty}"])
    client = tb.client()
    try:
        a.wait_registered()
        client.create(one_gpu_claim("acc", ns))
        client.create(workload("app", ns, claim="acc"))

        def refused() -> str | None:
            pod = client.get(Pod, "app", namespace=ns)
            for st in (pod.status.containerStatuses if pod.status else None) or []:
                w = st.state.waiting if st.state else None
                if w and w.reason == "CreateContainerError":
                    return w.message
            return None

        message = eventually(refused, 120, "CreateContainerError")
    finally:
        a.stop()
    assert "CDI device injection failed" in message
    assert f"{empty}/dev/nvidia" in message
    events = client.list(Event, namespace=ns, fields={"involvedObject.name": "app"})
    assert any(e.reason == "Failed" and "CDI" in (e.message or "") for e in events)
    assert running_container(client, "app", ns) is None


def _served_claim(tb: Testbed, client: Client, ns: str, name: str) -> Seen:
    client.create(one_gpu_claim(name, ns))
    client.create(workload(name, ns, claim=name))
    wait_running(client, name, ns)
    got = seen(tb, ns, name)
    claim = client.get(ResourceClaim, name, namespace=ns)
    (bus,) = bus_ids(client, claim, tb.node_name).values()
    assert got.env["ACCELERATOR_UNITS"] == bus
    assert len(got.char_devices(r"/dev/nvidia\d+")) == 1
    return got


def test_prepared_claims_survive_agent_kill_runtime_and_kubelet_restarts(
    runtime_testbed: Testbed, runtime_namespace: str, agent: AgentProcess
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    client.create(gpus_and_nic_claim("acc", ns))
    client.create(workload("app", ns, claim="acc"))
    container = wait_running(client, "app", ns)
    cid = container.removeprefix("containerd://")
    before = seen(tb, ns, "app")
    claim = client.get(ResourceClaim, "acc", namespace=ns)
    assert claim.metadata is not None
    uid = claim.metadata.uid
    assert uid in agent.checkpoint_claims()

    def still_the_same() -> None:
        assert running_container(client, "app", ns) == container
        # ... and containerd agrees that its task is running.
        runtime = tb.kubelet.containerd
        assert runtime is not None
        tasks = runtime.ctr("tasks", "list").stdout.splitlines()
        assert any(line.split()[:1] == [cid] and "RUNNING" in line for line in tasks)
        assert uid in agent.checkpoint_claims()
        assert uid in agent.spec_uids()

    # 1. The agent is killed outright and comes back on its checkpoint.
    agent.kill()
    still_the_same()
    agent.start(extra=[f"--device-root={tb.kubelet.device_root}"])
    agent.wait_registered()
    still_the_same()
    _served_claim(tb, client, ns, "after-agent")

    # 2. containerd restarts (its shims and the containers stay).
    tb.restart_runtime()
    still_the_same()
    _served_claim(tb, client, ns, "after-containerd")

    # 3. The kubelet restarts and registers the agent again.
    tb.restart_kubelet()
    agent.wait_log("kubelet registered plugin kubeacc.io", 60, count=agent.starts + 1)
    still_the_same()
    _served_claim(tb, client, ns, "after-kubelet")
    still_the_same()
    pod = client.get(Pod, "app", namespace=ns)
    assert pod.status is not None and pod.status.containerStatuses is not None
    assert pod.status.containerStatuses[0].restartCount == 0
    assert before.env["ACCELERATOR_UNITS"]


def test_device_plugin_devices_come_in_through_containerd_cdi(
    runtime_testbed: Testbed, runtime_namespace: str, host: Path, tmp_path: Path
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    kubelet = tb.kubelet
    config = tmp_path / "dp.yaml"
    config.write_text(
        "apiVersion: kubeacc.io/v1alpha1\nkind: DevicePluginConfig\ntypes: {gpu: {}}\ncdi: true\n"
    )
    args = [
        "device-plugin",
        f"--host-root={host}",
        f"--device-root={kubelet.device_root}",
        f"--plugin-dir={kubelet.device_plugin_dir}",
        f"--cdi-dir={kubelet.cdi_dir}",
        f"--config={config}",
        "--interval=1",
    ]
    with kubeacc_process(args, tmp_path / "device-plugin.log"):

        def allocatable() -> str | None:
            node = client.get(Node, tb.node_name)
            alloc = (node.status.allocatable if node.status else None) or {}
            return (
                alloc.get("kubeacc.io/gpu")
                if alloc.get("kubeacc.io/gpu") not in (None, "0")
                else None
            )

        assert eventually(allocatable, 60, "kubeacc.io/gpu allocatable") == "8"
        client.create(workload("dp", ns, gpus=2))
        wait_running(client, "dp", ns)
        got = seen(tb, ns, "dp")
        units = got.env["ACCELERATOR_UNITS"].split(",")
        assert len(units) == 2
        # KUBEACC_DEVICE is set only by the CDI spec's per-device edits (not by Allocate).
        assert got.env["KUBEACC_DEVICE"] in units
        gpus = got.char_devices(r"/dev/nvidia\d+")
        assert len(gpus) == 2
        assert all(got.dev[p][1] == null_numbers() for p in gpus)
        client.delete(Pod, "dp", namespace=ns, grace_period=0)
