"""kube-acc on Cyborg end to end: ``kubeacc agent --inventory cyborg`` on the testbed's node
(a real kubelet) and the tests' Cyborg cloud (real Cyborg, Placement, RabbitMQ).

A pod's claim lands on a Cyborg slot; Cyborg shows the ARQ Bound to this node with the claim as
its instance, Placement the allocation; the pod's deletion unbinds and deletes both. The agent
SIGKILLed at every step of prepare and unprepare leaves, after its restart, no orphan ARQ or
allocation, the claim prepared once or not at all. Units Cyborg gave to something else are never
offered."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.cyborgcloud import FAKE_SLOTS, CyborgCloud
from kubeacc.testbed.identities import cert_client
from tests.conftest import CYBORG_NODE

from ....nodestack import claim_pod as pod_obj
from ....nodestack import unschedulable
from ....testbed.helpers import eventually, forbidden
from ..agentproc import AgentProcess
from ..test_e2e import claim_obj, gone, running
from .conftest import PROJECT, USER, events_address, leftover

pytestmark = [pytest.mark.cluster, pytest.mark.cyborg]


def fpgas(count: int = 1) -> dict[str, Any]:
    request = {"deviceClassName": "fpga.kubeacc.io", "count": count}
    return {"devices": {"requests": [{"name": "fpga", "exactly": request}]}}


class CyborgAgent(AgentProcess):
    """``kubeacc agent --inventory cyborg`` with its Cyborg flags on every start."""

    cyborg_flags: list[str]

    def start_on_cyborg(self, pause_at: str | None = None) -> None:
        self.start(pause_at=pause_at, extra=self.cyborg_flags)
        self.wait_registered(90)


def cyborg_flags(cloud: CyborgCloud, tmp_path: Path) -> list[str]:
    """The agent's flags for the tests' cloud, its credentials file written under ``tmp_path``."""
    creds = tmp_path / "cyborg-credentials.yaml"
    creds.write_text(
        yaml.safe_dump(
            {
                "cyborgUrl": cloud.cyborg_url,
                "placementUrl": cloud.placement_url,
                "token": "admin",
                "projectId": PROJECT,
                "userId": USER,
            }
        )
    )
    port = events_address(cloud)[1]
    return [
        "--inventory=cyborg",
        f"--cyborg-credentials={creds}",
        f"--cyborg-events-address=127.0.0.1:{port}",
        "--cyborg-bind-timeout=30",
    ]


@pytest.fixture
def agent(testbed: Testbed, cyborg_cloud: CyborgCloud, tmp_path: Path) -> Iterator[CyborgAgent]:
    assert testbed.node_name == CYBORG_NODE
    host = profiles.build("amd-gpu", tmp_path / "host")
    a = CyborgAgent(testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path)
    a.cyborg_flags = cyborg_flags(cyborg_cloud, tmp_path)
    try:
        yield a
    finally:
        a.stop()
        leftover(cyborg_cloud, delete=True)


def _published(client: Client) -> list[str]:
    slices = client.list(
        ResourceSlice, fields={"spec.nodeName": CYBORG_NODE, "spec.driver": DRIVER_NAME}
    )
    return sorted(d.name for s in slices for d in (s.spec.devices or []))


def _bound(cloud: CyborgCloud, uid: str) -> list[dict[str, Any]]:
    return list(cloud.cyborg("GET", f"/v2/accelerator_requests?instance={uid}")["arqs"])


def _claim_uid(client: Client, name: str, ns: str) -> str:
    got = client.get(ResourceClaim, name, namespace=ns).metadata
    assert got is not None and got.uid is not None
    return got.uid


def _allocation(cloud: CyborgCloud, uid: str) -> list[dict[str, int]]:
    got = cloud.placement("GET", f"/allocations/{uid}")["allocations"]
    return [a["resources"] for a in got.values()]


def test_pod_runs_on_a_cyborg_device_and_its_deletion_frees_it(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    cyborg_cloud: CyborgCloud,
    agent: CyborgAgent,
) -> None:
    agent.start_on_cyborg()
    eventually(lambda: len(_published(kube_client)) == FAKE_SLOTS, 60, "Cyborg's slots published")
    kube_client.create(claim_obj("fpga", namespace, fpgas()))
    kube_client.create(pod_obj("app", namespace, "fpga"))
    eventually(lambda: running(kube_client, "app", namespace), 120, "pod Running")
    uid = _claim_uid(kube_client, "fpga", namespace)
    (arq,) = _bound(cyborg_cloud, uid)
    assert arq["state"] == "Bound" and arq["hostname"] == CYBORG_NODE
    assert arq["attach_handle_info"]["bus"] == "0c"
    assert _allocation(cyborg_cloud, uid) == [{"FPGA": 1}]
    (spec_uid,) = agent.spec_uids()
    assert spec_uid == uid

    kube_client.delete(Pod, "app", namespace=namespace, grace_period=0)
    eventually(lambda: gone(kube_client, "app", namespace), 120, "pod gone")
    kube_client.delete(ResourceClaim, "fpga", namespace=namespace)
    eventually(lambda: not agent.spec_uids(), 60, "claim unprepared")
    eventually(
        lambda: leftover(cyborg_cloud) == {"arqs": [], "allocations": {}},
        30,
        "ARQ and allocation deleted",
    )


PREPARE_POINTS = [
    "prepare-after-arq",
    "prepare-after-allocation",
    "prepare-after-bind",
    "prepare-after-cdi",
    "prepare-after-checkpoint",
]
UNPREPARE_POINTS = ["unprepare-after-unbind", "unprepare-after-arq-delete", "unprepare-after-cdi"]


def _restart(agent: CyborgAgent) -> None:
    agent.kill()
    agent.start_on_cyborg()


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_killed_during_prepare_leaves_one_binding(
    kube_client: Client,
    namespace: str,
    cyborg_cloud: CyborgCloud,
    agent: CyborgAgent,
    point: str,
) -> None:
    agent.start_on_cyborg(point)
    eventually(lambda: len(_published(kube_client)) == FAKE_SLOTS, 60, "Cyborg's slots published")
    kube_client.create(claim_obj("fpga", namespace, fpgas()))
    kube_client.create(pod_obj("app", namespace, "fpga"))
    assert agent.wait_paused() == point
    uid = _claim_uid(kube_client, "fpga", namespace)
    _restart(agent)

    eventually(lambda: running(kube_client, "app", namespace), 120, "pod Running after restart")
    (arq,) = _bound(cyborg_cloud, uid)
    assert arq["state"] == "Bound"
    now = leftover(cyborg_cloud)
    assert [a["uuid"] for a in now["arqs"]] == [arq["uuid"]]  # no orphan of the first try
    assert list(now["allocations"]) == [uid]
    assert _allocation(cyborg_cloud, uid) == [{"FPGA": 1}]
    assert list(agent.checkpoint_claims()) == [uid]

    kube_client.delete(Pod, "app", namespace=namespace, grace_period=0)
    eventually(lambda: gone(kube_client, "app", namespace), 120, "pod gone")
    kube_client.delete(ResourceClaim, "fpga", namespace=namespace)
    eventually(
        lambda: leftover(cyborg_cloud) == {"arqs": [], "allocations": {}},
        60,
        "ARQ and allocation deleted",
    )


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
def test_killed_during_unprepare_leaves_nothing(
    kube_client: Client,
    namespace: str,
    cyborg_cloud: CyborgCloud,
    agent: CyborgAgent,
    point: str,
) -> None:
    agent.start_on_cyborg(point)
    kube_client.create(claim_obj("fpga", namespace, fpgas()))
    kube_client.create(pod_obj("app", namespace, "fpga"))
    eventually(lambda: running(kube_client, "app", namespace), 120, "pod Running")
    uid = _claim_uid(kube_client, "fpga", namespace)
    assert len(_bound(cyborg_cloud, uid)) == 1
    kube_client.delete(Pod, "app", namespace=namespace, grace_period=0)
    assert agent.wait_paused() == point
    _restart(agent)

    eventually(lambda: gone(kube_client, "app", namespace), 120, "pod gone after restart")
    eventually(lambda: not agent.checkpoint_claims(), 60, "claim forgotten")
    eventually(
        lambda: leftover(cyborg_cloud) == {"arqs": [], "allocations": {}},
        60,
        "ARQ and allocation deleted",
    )
    assert not agent.spec_uids()


def test_units_held_outside_kube_acc_are_never_offered(
    kube_client: Client,
    namespace: str,
    cyborg_cloud: CyborgCloud,
    agent: CyborgAgent,
) -> None:
    root = cyborg_cloud.placement("GET", f"/resource_providers?name={CYBORG_NODE}")
    tree = cyborg_cloud.placement(
        "GET", f"/resource_providers?in_tree={root['resource_providers'][0]['uuid']}"
    )["resource_providers"]
    rp = next(r for r in tree if r["parent_provider_uuid"])
    server = "5d3c1f7e-8a9b-4c2d-9e0f-1a2b3c4d5e6f"  # a Nova server, say
    body = {
        "allocations": {rp["uuid"]: {"resources": {"FPGA": FAKE_SLOTS - 1}}},
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    cyborg_cloud.placement("PUT", f"/allocations/{server}", body)
    agent.start_on_cyborg()
    eventually(lambda: len(_published(kube_client)) == 1, 60, "one slot left published")
    kube_client.create(claim_obj("two", namespace, fpgas(2)))
    kube_client.create(pod_obj("big", namespace, "two"))
    kube_client.create(claim_obj("one", namespace, fpgas(1)))
    kube_client.create(pod_obj("small", namespace, "one"))
    eventually(lambda: running(kube_client, "small", namespace), 120, "the one-unit pod Running")
    eventually(lambda: unschedulable(kube_client, "big", namespace), 60, "two units refused")
    uid = _claim_uid(kube_client, "one", namespace)
    assert _allocation(cyborg_cloud, uid) == [{"FPGA": 1}]
    assert _allocation(cyborg_cloud, server) == [{"FPGA": FAKE_SLOTS - 1}]


TENANT_USER = "mallory"


def _grant_edit(client: Client, ns: str) -> None:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tenant-edit", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT_USER}
        ],
    }
    client.create(from_dict(binding))


def test_a_tenant_binds_and_unbinds_only_through_its_own_claims(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    cyborg_cloud: CyborgCloud,
    agent: CyborgAgent,
    tmp_path: Path,
) -> None:
    """The tenant has ``edit`` in its own namespace. The victim's pod in another holds a
    Cyborg unit; whatever the tenant tries (the victim's claim deleted or its status written, a
    pod on the victim's claim by name, an opaque config that names Cyborg's fields), the
    victim's ARQ stays Bound to the victim's claim, and the only ARQ the tenant gets bound is
    one for its own claim, unbound when that claim goes."""
    agent.start_on_cyborg()
    kube_client.create(claim_obj("victim", namespace, fpgas()))
    kube_client.create(pod_obj("victim", namespace, "victim"))
    eventually(lambda: running(kube_client, "victim", namespace), 120, "the victim Running")
    victim = _claim_uid(kube_client, "victim", namespace)
    (held,) = _bound(cyborg_cloud, victim)

    tenant_ns = f"tenant-{uuid.uuid4().hex[:6]}"
    kube_client.create(Namespace(metadata=ObjectMeta(name=tenant_ns)))
    try:
        testbed.wait_service_account(tenant_ns)
        _grant_edit(kube_client, tenant_ns)
        tenant = cert_client(testbed, tmp_path / "mallory", TENANT_USER, (), TENANT_USER)
        forbidden(
            "delete another namespace's claim",
            lambda: tenant.delete(ResourceClaim, "victim", namespace=namespace),
        )
        forbidden(
            "write another namespace's claim status",
            lambda: tenant.patch(
                ResourceClaim.Status,
                "victim",
                {"status": {"reservedFor": []}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            ),
        )
        # Cyborg's fields in an opaque config: not a config of kube-acc's, the claim refused
        smuggled = fpgas()
        smuggled["devices"]["config"] = [
            {
                "opaque": {
                    "driver": DRIVER_NAME,
                    "parameters": {
                        "apiVersion": "kubeacc.io/v1alpha1",
                        "kind": "CyborgBind",
                        "instance_uuid": victim,
                        "arq": held["uuid"],
                    },
                }
            }
        ]
        tenant.create(claim_obj("smuggled", tenant_ns, smuggled))
        tenant.create(pod_obj("smuggled", tenant_ns, "smuggled"))
        # the victim's claim by name: in the tenant's namespace there is no such claim
        tenant.create(pod_obj("by-name", tenant_ns, "victim"))
        tenant.create(claim_obj("own", tenant_ns, fpgas()))
        tenant.create(pod_obj("own", tenant_ns, "own"))
        eventually(lambda: running(kube_client, "own", tenant_ns), 120, "the tenant's own pod")
        own = _claim_uid(kube_client, "own", tenant_ns)
        smuggled_uid = _claim_uid(kube_client, "smuggled", tenant_ns)
        (own_arq,) = _bound(cyborg_cloud, own)
        assert own_arq["state"] == "Bound"
        agent.wait_log(f"prepare {tenant_ns}/smuggled", 60)
        assert not running(kube_client, "smuggled", tenant_ns)
        assert not running(kube_client, "by-name", tenant_ns)
        assert _bound(cyborg_cloud, smuggled_uid) == []
        instances = {a["instance_uuid"] for a in leftover(cyborg_cloud)["arqs"]}
        assert instances == {victim, own}

        tenant.delete(Pod, "own", namespace=tenant_ns, grace_period=0)
        eventually(lambda: gone(kube_client, "own", tenant_ns), 120, "the tenant's pod gone")
        tenant.delete(ResourceClaim, "own", namespace=tenant_ns)
        eventually(lambda: _bound(cyborg_cloud, own) == [], 60, "the tenant's ARQ deleted")
    finally:
        kube_client.delete(Namespace, tenant_ns)
    (still,) = _bound(cyborg_cloud, victim)
    assert (still["uuid"], still["state"]) == (held["uuid"], "Bound")
    assert running(kube_client, "victim", namespace)
