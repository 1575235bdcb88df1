"""What the real-runtime tests of a container's GPU user space share: the host's C library
for a probe program (the workload image is static busybox alone), a pod that runs a probe
script and marks its end, its log up to that mark, a memory-share claim and an agent process
on the runtime node."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lightkube.codecs import from_dict

from kubeacc.testbed import Testbed
from kubeacc.testbed.images import WORKLOAD_IMAGE
from tests.agent.dra.agentproc import AgentProcess
from tests.testbed.helpers import eventually

#: Printed by a probe pod's script after its probe, before it sleeps.
END = "END-OF-PROBE"
#: The bus id of the GPU the runtime tests' host shares by memory.
SHARED_BDF = "0000:1b:00.0"


def copy_glibc(dest: Path) -> None:
    """The host's dynamic loader and C library into ``dest``, for a probe built against them."""
    shutil.copy(Path("/lib64/ld-linux-x86-64.so.2").resolve(), dest / "ld-linux-x86-64.so.2")
    shutil.copy(Path("/lib/x86_64-linux-gnu/libc.so.6").resolve(), dest / "libc.so.6")


def probe_pod(
    name: str,
    ns: str,
    script: str,
    mounts: dict[str, tuple[str, dict[str, Any]]],
    env: dict[str, str],
    **spec: Any,
) -> Any:
    """A pod whose container ``app`` runs ``script``, prints :data:`END` and sleeps.
    ``mounts``: volume name -> (container path, volume source), mounted read-only; the spec's
    ``container`` entry is merged into the container, the rest into the pod's spec."""
    container: dict[str, Any] = {
        "name": "app",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"{script}; echo {END}; sleep 3600"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "volumeMounts": [
            {"name": vol, "mountPath": path, "readOnly": True} for vol, (path, _) in mounts.items()
        ],
        **spec.pop("container", {}),
    }
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, **spec.pop("metadata", {})},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "containers": [container],
                "volumes": [{"name": vol, **source} for vol, (_, source) in mounts.items()],
                **spec,
            },
        }
    )


def probe_log(tb: Testbed, ns: str, pod: str) -> str:
    """What the probe pod's container printed before :data:`END` (waits for it)."""

    def complete() -> str:
        text = tb.kubelet.container_log(ns, pod, "app")
        return text if END in text else ""

    return eventually(complete, 90, f"the output of {pod}").split(END)[0]


def share_claim(name: str, ns: str, memory: str = "1Gi") -> Any:
    """A claim for a ``memory`` share of a memory-shared GPU."""
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.kubeacc.io",
            "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
            "capacity": {"requests": {"kubeacc.io/memory": memory}},
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


def claimed(claim: str) -> dict[str, Any]:
    """The pod spec entries that give the container the ResourceClaim ``claim``."""
    return {
        "container": {"resources": {"claims": [{"name": "acc"}]}},
        "resourceClaims": [{"name": "acc", "resourceClaimName": claim}],
    }


def start_agent(tb: Testbed, host: Path, tmp_path: Path, *extra: str) -> AgentProcess:
    """The node agent on the runtime node, its CDI specs where containerd reads them."""
    kubelet = tb.kubelet
    a = AgentProcess(kubelet.node_name, host, tb.kubeconfig, kubelet.root_dir, tmp_path)
    a.cdi_dir = kubelet.cdi_dir
    a.start(extra=[f"--device-root={kubelet.device_root}", *extra])
    return a
