"""One node of kube-acc as deployed, on the testbed's real kubelet (node-a), for the tests that
cross components: the deploy/ manifests (CRDs, RBAC, admission, DeviceClasses), the controller,
and on the node the life-cycle agent and the node agent (``kubeacc agent``, a real process that
the kubelet calls), both with the node agent's own identity (user
``system:kubeacc:agent:<node>`` in group ``kubeacc:agents``), so RBAC and the admission policy
apply to them as in a cluster."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

from kubeacc.controller.controller import Controller
from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.deploy import apply_manifest
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.identities import agent_kubeconfig
from kubeacc.testbed.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.crdfixtures import (
    create_operation,
    make_controller,
    operation_finished,
    wait_until_no_claim_holds,
)
from tests.testbed.helpers import eventually

DRIVER = "kubeacc.io"


def install(testbed: Testbed) -> None:
    """What an admin installs besides the CRDs: RBAC, admission policy, the driver's classes."""
    admin = testbed.client(field_manager="kubeacc-install")
    for manifest in (
        "rbac/agent.yaml",
        "rbac/controller.yaml",
        "admission/agent-node-restriction.yaml",
    ):
        apply_manifest(admin, manifest)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeacc.cli",
            "install-classes",
            f"--kubeconfig={testbed.kubeconfig}",
        ],
        check=True,
        capture_output=True,
    )


@dataclass
class NodeStack:
    testbed: Testbed
    client: Client
    host: Path
    agent: AgentProcess
    kernel: SyntheticKernel
    node: str
    controller: Controller

    def accelerators(self) -> dict[str, dict[str, Any]]:
        """The node's Accelerators by device name."""
        return {
            a["spec"]["deviceName"]: a
            for a in (
                as_dict(o) for o in self.client.list(Accelerator, labels={NODE_LABEL: self.node})
            )
        }

    def gpus(self, count: int = 8, timeout: float = 60) -> list[str]:
        """The node's GPU Accelerators by device name, sorted, once all ``count`` are written
        (the agent writes them one by one: the first LIST that finds any may find only some)."""

        def all_written() -> list[str] | None:
            names = sorted(d for d in self.accelerators() if d.startswith("gpu-"))
            return names if len(names) == count else None

        return eventually(all_written, timeout, f"the {count} GPUs as Accelerators")

    def users(self, device: str) -> list[dict[str, Any]]:
        acc = self.accelerators().get(device) or {}
        return list((acc.get("status") or {}).get("allocatedTo") or [])

    def slice_device(self, device: str) -> dict[str, Any] | None:
        for s in self.client.list(
            ResourceSlice, fields={"spec.nodeName": self.node, "spec.driver": DRIVER}
        ):
            for d in as_dict(s)["spec"].get("devices") or []:
                if d["name"] == device:
                    return dict(d)
        return None

    def operation(self, ns: str, name: str, action: str, targets: list[str], **extra: Any) -> None:
        create_operation(self.client, ns, name, {"action": action, "targets": targets, **extra})

    def finished(self, ns: str, name: str, timeout: float = 60) -> dict[str, Any]:
        return eventually(
            lambda: operation_finished(self.client, ns, name),
            timeout,
            f"operation {ns}/{name} finished",
        )

    def cdi_spec(self, claim_uid: str) -> dict[str, Any]:
        path = self.agent.cdi_dir / f"kubeacc.io-claim_{claim_uid}.json"
        return dict(json.loads(path.read_text()))


@contextlib.contextmanager
def node_stack(
    testbed: Testbed,
    tmp: Path,
    profile: str,
    agent_args: list[str] | None = None,
    node: str | None = None,
) -> Iterator[NodeStack]:
    """Controller (thread), life-cycle agent (thread) and node agent (process) of ``node`` (the
    testbed's first node by default)."""
    install(testbed)
    node = node or testbed.node_name
    wait_until_no_claim_holds(testbed.client(), node)
    host = build(profile, tmp / "host")
    kubeconfig = agent_kubeconfig(testbed, node, tmp)
    admin = testbed.client(field_manager="kubeacc-test")
    controller = make_controller(testbed)
    kernel = SyntheticKernel(host)
    (tmp / "bitstreams").mkdir(exist_ok=True)
    lifecycle = LifecycleAgent(
        Client(KubeConfig.from_file(kubeconfig)),
        node_name=node,
        host=SyntheticHost(host, kernel=kernel),
        bitstream_dir=tmp / "bitstreams",
        interval=1.0,
    )
    agent = AgentProcess(node, host, kubeconfig, testbed.node(node).root_dir, tmp)
    stop = threading.Event()
    threads = [
        threading.Thread(target=c.run, args=(stop,), daemon=True) for c in (controller, lifecycle)
    ]
    for t in threads:
        t.start()
    agent.start(extra=agent_args, apply_classes=False)
    try:
        agent.wait_registered()
        yield NodeStack(testbed, admin, host, agent, kernel, node, controller)
    finally:
        agent.stop()
        stop.set()
        for t in threads:
            t.join(10)


def resource_claim(
    name: str, ns: str, requests: list[dict[str, Any]], config: list[dict[str, Any]] | None = None
) -> Any:
    """A ResourceClaim of these device requests (and opaque configs)."""
    devices: dict[str, Any] = {"requests": requests}
    if config:
        devices["config"] = config
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": devices},
        }
    )


def claim(name: str, ns: str, device_class: str, selector: str | None = None) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "acc", "exactly": exactly}]}},
        }
    )


def _pod(name: str, ns: str, spec: dict[str, Any], resources: dict[str, Any]) -> Any:
    container = {"name": "main", "image": "registry.example/app:1", "resources": resources}
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"terminationGracePeriodSeconds": 0, **spec, "containers": [container]},
        }
    )


def claim_pod(name: str, ns: str, claim_name: str) -> Any:
    """A pod whose one container uses the ResourceClaim ``claim_name``."""
    claims = {"resourceClaims": [{"name": "acc", "resourceClaimName": claim_name}]}
    return _pod(name, ns, claims, {"claims": [{"name": "acc"}]})


def resource_pod(name: str, ns: str, resources: dict[str, str]) -> Any:
    """A pod asking for extended resources (device-plugin mode)."""
    return _pod(name, ns, {}, {"limits": resources})


def pod_phase(client: Client, name: str, ns: str) -> str:
    pod = client.get(Pod, name, namespace=ns)
    return (pod.status.phase if pod.status else None) or ""


def unschedulable(client: Client, name: str, ns: str) -> str | None:
    """The scheduler's message when it could not place the pod, else None."""
    pod = client.get(Pod, name, namespace=ns)
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return c.message or "unschedulable"
    return None


def allocated_device(client: Client, name: str, ns: str) -> str | None:
    obj = as_dict(client.get(ResourceClaim, name, namespace=ns))
    results = (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return str(results[0]["device"]) if results else None


def device_class_exists(client: Client, name: str) -> bool:
    try:
        client.get(DeviceClass, name)
    except ApiError:
        return False
    return True
