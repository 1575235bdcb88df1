"""kube-acc under Volcano: the Volcano testbed (``volcano_testbed``: Volcano's scheduler and
controller manager beside kube-scheduler, seven real kubelets of ``VOLCANO_SHAPES``) with
kube-acc's agents on every node, and what the tests build Volcano objects with."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.agent.dra.sharing.limits import ShareSelector
from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.crds.resources import as_dict
from kubeacc.deviceplugin.config import DevicePluginConfig, TypeConfig
from kubeacc.model import DeviceType
from kubeacc.testbed import Testbed
from kubeacc.testbed.shapes import VOLCANO_SHAPES
from kubeacc.testbed.volcano import DEFAULT_QUEUE, SCHEDULER_NAME

VcJob = create_namespaced_resource("batch.volcano.sh", "v1alpha1", "Job", "jobs")
PodGroup = create_namespaced_resource("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups")
Queue = create_global_resource("scheduling.volcano.sh", "v1beta1", "Queue", "queues")

#: The L4 of node ``h100-l4``, published memory-shared (``kubeacc.io/memory``).
SHARED_L4 = "0000:03:00.0"
#: Nodes whose agents serve these types through the kubelet device plugin API, per model.
PER_MODEL = {
    "amd-gpu": DevicePluginConfig(types={DeviceType.GPU: TypeConfig(per_model=True)}),
    "l4": DevicePluginConfig(types={DeviceType.GPU: TypeConfig(per_model=True)}),
    "kunlun": DevicePluginConfig(types={DeviceType.XPU: TypeConfig(per_model=True)}),
}
DRA_GPU_NODES = ("gpu-server", "h100-l4")


@pytest.fixture(scope="package")
def kubeacc_volcano(
    volcano_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeaccStack]:
    """kube-acc on the Volcano testbed: DRA on the GPU servers (the L4 of ``h100-l4``
    memory-shared; FPGA bitstreams loaded at prepare), ``xpu-dra`` and ``mig``, the device
    plugin with per-model resources on ``amd-gpu`` and ``l4`` (GPUs) and ``kunlun`` (XPUs)."""
    stack = KubeaccStack(
        volcano_testbed,
        tmp_path_factory.mktemp("volcano"),
        {s.name: s.profile for s in VOLCANO_SHAPES},
        interval=1.0,
        device_plugins=dict(PER_MODEL),
        memory_shared={"h100-l4": (ShareSelector("pci", SHARED_L4),)},
        # Volcano's scheduler crashes binding a pod whose device has binding conditions
        # (test_dra_kinds.py): bitstreams are loaded at prepare under Volcano
        fpga_binding_conditions=False,
    )
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def vcjob(
    name: str,
    ns: str,
    tasks: list[dict[str, Any]],
    min_available: int,
    queue: str = DEFAULT_QUEUE,
) -> Any:
    """A Volcano Job with every field its admission webhook would default (the testbed runs no
    webhook). ``tasks``: ``{"name", "replicas", "pod": pod spec}``."""
    return VcJob.from_dict(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "queue": queue,
                "minAvailable": min_available,
                "tasks": [
                    {
                        "name": t["name"],
                        "replicas": t["replicas"],
                        "minAvailable": t["replicas"],
                        "template": {"spec": t["pod"]},
                    }
                    for t in tasks
                ],
            },
        }
    )


#: What each container asks of CPU and memory. Volcano counts only these (and extended
#: resources), never DRA claims: a pod asking nothing else is BestEffort to it, skipped by the
#: gang-aware ``allocate`` action and bound alone by ``backfill``.
REQUESTS = {"cpu": "100m", "memory": "64Mi"}


def pod_spec(
    claims: list[dict[str, Any]] | None = None,
    limits: dict[str, str] | None = None,
    best_effort: bool = False,
) -> dict[str, Any]:
    """A pod spec of one container using every claim of ``claims`` and asking ``limits``, and
    :data:`REQUESTS` unless ``best_effort``."""
    resources: dict[str, Any] = {} if best_effort else {"requests": dict(REQUESTS)}
    if claims:
        resources["claims"] = [{"name": c["name"]} for c in claims]
    if limits:
        resources["limits"] = dict(limits)
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "main", "image": "registry.example/train:1", "resources": resources}
        ],
    }
    if claims:
        spec["resourceClaims"] = claims
    return spec


def claim_template(name: str, ns: str, spec: dict[str, Any]) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": spec},
        }
    )


def job_pods(client: Client, ns: str, job: str) -> list[Pod]:
    return [
        p
        for p in client.list(Pod, namespace=ns)
        if p.metadata and (p.metadata.annotations or {}).get("volcano.sh/job-name") == job
    ]


def phases(pods: list[Pod]) -> dict[str, str]:
    return {
        str(p.metadata.name if p.metadata else ""): str((p.status.phase if p.status else "") or "")
        for p in pods
    }


def job_running(client: Client, ns: str, job: str, count: int) -> dict[str, str] | None:
    """The phases of the Job's pods once all ``count`` of them are Running, else None."""
    got = phases(job_pods(client, ns, job))
    return got if len(got) == count and set(got.values()) == {"Running"} else None


def pod_claims(client: Client, pod: Pod) -> list[dict[str, Any]]:
    """The ResourceClaims the pod's templates became (as dicts)."""
    assert pod.metadata and pod.status
    names = [s.resourceClaimName for s in pod.status.resourceClaimStatuses or []]
    return [
        as_dict(client.get(ResourceClaim, n, namespace=pod.metadata.namespace)) for n in names if n
    ]


def allocated_claims(client: Client, nodes: tuple[str, ...] = DRA_GPU_NODES) -> list[str]:
    """``ns/name`` of every allocated claim with a device in one of ``nodes``' pools."""
    out = []
    for c in client.list(ResourceClaim, namespace="*"):
        d = as_dict(c)
        results = (((d.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results"
        ) or []
        if any(r["pool"] in nodes for r in results):
            out.append(f"{d['metadata']['namespace']}/{d['metadata']['name']}")
    return out


def wait_no_allocations(client: Client, timeout: float = 120) -> None:
    """Until no claim holds a GPU of the DRA GPU servers (the earlier tests' pods are gone)."""
    deadline = time.monotonic() + timeout
    while (held := allocated_claims(client)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not held, f"claims still allocated after {timeout}s: {held}"
