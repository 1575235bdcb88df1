"""A tenant cannot use Volcano to take another namespace's devices.

The tenant is user ``mallory``: the ``edit`` role in its own namespace, plus what an admin grants
Volcano's users there (Volcano Jobs and PodGroups; ``edit`` does not cover Volcano's API groups
on this cluster). The victim's Volcano Job in another namespace holds a pair of H100s through a
claim template. Whatever the tenant tries through Volcano's objects (a Job or PodGroup in the
victim's namespace, a Queue, the victim's claim by name, a gang big enough to want the victim's
pair), the API server refuses it or Volcano leaves the tenant's pods unbound, and the victim's
claim keeps its devices and its one consumer. (The Volcano testbed runs no ``preempt`` or
``reclaim`` action: docs/choosing.md, "With Volcano", says what enabling them means.)"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.crds.resources import as_dict
from kubeacc.testbed.identities import cert_client
from kubeacc.testbed.volcano import DEFAULT_QUEUE

from ..testbed.helpers import eventually, forbidden
from .conftest import (
    PodGroup,
    Queue,
    VcJob,
    claim_template,
    job_pods,
    job_running,
    pod_claims,
    pod_spec,
    vcjob,
    wait_no_allocations,
)
from .test_gang import GANG, PAIR

pytestmark = pytest.mark.cluster

TENANT_USER = "mallory"
CLAIMS = [{"name": "gpus", "resourceClaimTemplateName": "h100-pair"}]


def _grant(client: Client, ns: str) -> None:
    """``edit`` in ``ns`` and Volcano's Jobs and PodGroups there, for the tenant."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "volcano-user", "namespace": ns},
        "rules": [
            {
                "apiGroups": ["batch.volcano.sh"],
                "resources": ["jobs"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            },
            {
                "apiGroups": ["scheduling.volcano.sh"],
                "resources": ["podgroups"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            },
        ],
    }
    client.create(from_dict(role))
    for name, kind, ref in (
        ("tenant-edit", "ClusterRole", "edit"),
        ("tenant-vc", "Role", "volcano-user"),
    ):
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": ref},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}
            ],
        }
        client.create(from_dict(binding))


def _claim_state(client: Client, ns: str, name: str) -> tuple[Any, list[str]]:
    claim = as_dict(client.get(ResourceClaim, name, namespace=ns))
    status = claim["status"]
    return status["allocation"]["devices"]["results"], [
        r["name"] for r in status.get("reservedFor") or []
    ]


def test_a_tenant_cannot_take_another_namespaces_devices_through_volcano(
    kubeacc_volcano: KubeaccStack,
    volcano_namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    stack, victim_ns = kubeacc_volcano, volcano_namespace
    admin = stack.client("kubeacc-test")
    wait_no_allocations(admin)
    tenant_ns = f"tenant-{uuid.uuid4().hex[:6]}"
    admin.create(Namespace(metadata=ObjectMeta(name=tenant_ns)))
    stack.testbed.wait_service_account(tenant_ns)
    _grant(admin, tenant_ns)
    tenant = cert_client(
        stack.testbed, tmp_path_factory.mktemp("mallory"), TENANT_USER, (), TENANT_USER
    )

    # The victim: a Volcano Job whose pod holds a pair of H100s.
    admin.create(claim_template("h100-pair", victim_ns, PAIR))
    admin.create(
        vcjob("victim", victim_ns, [{"name": "w", "replicas": 1, "pod": pod_spec(CLAIMS)}], 1)
    )
    eventually(lambda: job_running(admin, victim_ns, "victim", 1), 120, "the victim Running")
    (victim_pod,) = job_pods(admin, victim_ns, "victim")
    (claim,) = pod_claims(admin, victim_pod)
    claim_name = claim["metadata"]["name"]
    before = _claim_state(admin, victim_ns, claim_name)
    assert before[1] == [victim_pod.metadata.name if victim_pod.metadata else ""]

    # Through the API: nothing of the victim's namespace, nothing cluster-wide.
    spec = pod_spec([{"name": "gpus", "resourceClaimName": claim_name}])
    job = vcjob("steal", victim_ns, [{"name": "w", "replicas": 1, "pod": spec}], 1)
    forbidden("create a Volcano Job in another namespace", lambda: tenant.create(job))
    (group,) = admin.list(PodGroup, namespace=victim_ns)
    assert group.metadata and group.metadata.name
    forbidden(
        "change another namespace's PodGroup",
        lambda: tenant.patch(
            PodGroup,
            str(group.metadata.name),  # type: ignore[union-attr]
            {"spec": {"minMember": 0, "queue": "mallory"}},
            namespace=victim_ns,
            patch_type=PatchType.MERGE,
        ),
    )
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "mallory"},
        "spec": {"weight": 1000, "reclaimable": False},
    }
    forbidden("create a Queue", lambda: tenant.create(Queue.from_dict(queue)))
    forbidden(
        "change the default Queue",
        lambda: tenant.patch(
            Queue, DEFAULT_QUEUE, {"spec": {"weight": 1000}}, patch_type=PatchType.MERGE
        ),
    )
    forbidden(
        "read the victim's claim",
        lambda: tenant.get(ResourceClaim, claim_name, namespace=victim_ns),
    )
    forbidden(
        "delete the victim's pod",
        lambda: tenant.delete(Pod, str(victim_pod.metadata.name), namespace=victim_ns),  # type: ignore[union-attr]
    )

    # Through Volcano, in its own namespace: a Job naming the victim's claim (claims resolve in
    # the pod's own namespace), and a gang that only fits with the victim's pair.
    tenant.create(vcjob("steal", tenant_ns, [{"name": "w", "replicas": 1, "pod": spec}], 1))
    admin.create(claim_template("h100-pair", tenant_ns, PAIR))
    gang = vcjob(
        "greedy", tenant_ns, [{"name": "w", "replicas": GANG, "pod": pod_spec(CLAIMS)}], GANG
    )
    tenant.create(gang)
    eventually(lambda: len(job_pods(admin, tenant_ns, "greedy")) == GANG, 60, "the tenant's pods")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        bound = [
            p.metadata.name
            for p in admin.list(Pod, namespace=tenant_ns)
            if p.spec and p.spec.nodeName and p.metadata
        ]
        assert not bound, f"tenant pods bound: {bound}"
        assert _claim_state(admin, victim_ns, claim_name) == before
        time.sleep(0.5)
    assert job_running(admin, victim_ns, "victim", 1)
    assert [j.metadata.name for j in admin.list(VcJob, namespace=victim_ns) if j.metadata] == [
        "victim"
    ]
