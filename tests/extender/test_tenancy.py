"""Forged placement decisions, tried as a namespace user would, on the real testbed.

Two nodes (``gpu-a``: 2 NVIDIA L4, ``gpu-b``: 1 L4, shared through the node agents' device
plugins), the real kube-scheduler with ``kubeacc extender``, real kubelets calling Allocate,
and the admission policy deploy/admission/extender-decisions.yaml. The tenant is a user with
the ``edit`` role in namespace ``tenant`` only (a client certificate of the testbed CA); the
victim's pods run in namespace ``victim``. See docs/security.md, "Placement decisions".
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import ValidatingAdmissionPolicyBinding
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.rbac_authorization_v1 import RoleBinding

from kubeacc.contracts.names import DECISION_CONDITION
from kubeacc.contracts.wants import DECISION_ANNOTATION, GPU, MEMORY, Assigned, Decision
from kubeacc.controller.controller import Controller
from kubeacc.crds.deploy import apply_manifest
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.testbed.identities import cert_client
from tests.crdfixtures import create_operation, operation_finished, running, wait_for
from tests.extender.clusterlib import Cluster, extender_cluster, limits_pod
from tests.testbed.helpers import eventually, eventually_refused

pytestmark = pytest.mark.cluster

PROFILES = {"gpu-a": "l4-pair", "gpu-b": "edge-mixed"}
L4_MIB = 23034
TENANT, VICTIM = "tenant", "victim"
POLICY = "kubeacc-extender-decisions"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    with extender_cluster(
        tmp_path_factory.mktemp("tenancy"),
        request,
        plugin_nodes=PROFILES,
        dp_config="types:\n  gpu: {shared: true}\n",
        gpus=3,
        namespace=VICTIM,
    ) as cluster:
        client = cluster.client
        apply_manifest(client, "admission/extender-decisions.yaml")
        client.create(Namespace(metadata=ObjectMeta(name=TENANT)))
        cluster.testbed.wait_service_account(TENANT)
        client.create(  # type: ignore[call-overload]
            RoleBinding.from_dict(
                {
                    "metadata": {"name": "tenant-edit", "namespace": TENANT},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "edit",
                    },
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}
                    ],
                }
            )
        )
        yield cluster


@pytest.fixture(scope="module")
def tenant(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Client:
    """User ``mallory``: the ``edit`` role in namespace ``tenant``, nothing else."""
    return cert_client(
        cluster.testbed, tmp_path_factory.mktemp("mallory"), "mallory", (), "mallory"
    )


@pytest.fixture(scope="module")
def victim(cluster: Cluster) -> str:
    """A pod of another namespace holding gpu-b's only GPU whole; returns that GPU."""
    client = cluster.client
    client.create(
        _pod("holder", VICTIM, {GPU: "1"}, nodeSelector={"kubernetes.io/hostname": "gpu-b"})
    )
    eventually(lambda: _phase(client, "holder", VICTIM) == "Running", 120, "victim running")
    decision = _decision(client, "holder", VICTIM)
    assert decision is not None and decision.node == "gpu-b"
    (bdf,) = decision.containers[0].devices
    return bdf


def _pod(
    name: str,
    namespace: str,
    limits: dict[str, str],
    decision: Decision | None = None,
    **spec: Any,
) -> Any:
    notes = {DECISION_ANNOTATION: decision.to_json()} if decision else {}
    return limits_pod(name, namespace, limits, notes, **spec)


def _get(client: Client, name: str, namespace: str) -> dict[str, Any]:
    return as_dict(client.get(Pod, name, namespace=namespace))


def _phase(client: Client, name: str, namespace: str) -> str:
    return str((_get(client, name, namespace).get("status") or {}).get("phase") or "")


def _decision(client: Client, name: str, namespace: str) -> Decision | None:
    text = (_get(client, name, namespace)["metadata"].get("annotations") or {}).get(
        DECISION_ANNOTATION
    )
    return Decision.from_json(text) if text else None


def _failed(client: Client, name: str) -> str | None:
    status = _get(client, name, TENANT).get("status") or {}
    return str(status.get("message")) if status.get("phase") == "Failed" else None


def _gpu_use(cluster: Cluster, node: str) -> dict[str, Any]:
    return dict(cluster.extender.state(node)["gpus"])


def _victim_unharmed(cluster: Cluster, bdf: str) -> None:
    client = cluster.client
    assert _phase(client, "holder", VICTIM) == "Running"
    decision = _decision(client, "holder", VICTIM)
    assert decision is not None and decision.containers[0].devices == (bdf,)
    (record,) = cluster.testbed.node("gpu-b").container_records(namespace=VICTIM, pod="holder")
    assert record.envs["ACCELERATOR_UNITS"] == bdf
    assert _gpu_use(cluster, "gpu-b")[bdf]["used"]["whole"] is True
    # "in use" for operations: the Accelerator names the pod (anonymous units name no GPU)
    eventually(lambda: _users(client, "gpu-b", bdf) == [f"{VICTIM}/holder"], 60, "allocatedTo")


def _accelerator(client: Client, node: str, bdf: str) -> dict[str, Any]:
    for acc in client.list(Accelerator):
        d = as_dict(acc)
        device = (d.get("status") or {}).get("device") or {}
        if d["spec"].get("node") == node and (device.get("pci") or {}).get("busID") == bdf:
            return d
    raise AssertionError(f"no Accelerator for {bdf} on {node}")


def _users(client: Client, node: str, bdf: str) -> list[str]:
    users = _accelerator(client, node, bdf)["status"].get("allocatedTo") or []
    return sorted(f"{u.get('namespace')}/{u['name']}" for u in users if u["kind"] == "Pod")


def _refusal(op: dict[str, Any]) -> tuple[str, str]:
    (failed,) = [c for c in op["status"]["conditions"] if c["type"] == "Failed"]
    return str(failed["reason"]), str(failed["message"])


def test_a_tenant_cannot_write_a_decision(cluster: Cluster, tenant: Client, victim: str) -> None:
    forged = Decision("gpu-b", (Assigned("main", (victim,), memory=1),))
    # on create: a 1 MiB share, placed by hand next to the victim's whole GPU
    message = eventually_refused(
        lambda: tenant.create(_pod("forged", TENANT, {MEMORY: "1"}, forged, nodeName="gpu-b"))
    )
    assert "mallory may not set the annotation kubeacc.io/devices" in message, message
    # a pod without a GPU request and a forged whole GPU: the free GPU of gpu-a blocked
    blocker = Decision("gpu-a", (Assigned("main", ("0000:01:00.0",), whole=True),))
    message = eventually_refused(
        lambda: tenant.create(_pod("blocker", TENANT, {}, blocker, nodeName="gpu-a")), 0
    )
    assert "may not set the annotation" in message, message
    # on update: the tenant's own pod, the decision added afterwards
    tenant.create(_pod("plain", TENANT, {}, schedulerName="nobody"))
    patch: dict[str, Any] = {"metadata": {"annotations": {DECISION_ANNOTATION: forged.to_json()}}}
    message = eventually_refused(lambda: tenant.patch(Pod, "plain", patch, namespace=TENANT), 0)
    assert "may not set the annotation" in message, message
    # the tenant's pods scheduled through the extender still get their share
    tenant.create(_pod("honest", TENANT, {MEMORY: "1000"}))
    eventually(lambda: _phase(tenant, "honest", TENANT) == "Running", 120, "honest share")
    decision = _decision(tenant, "honest", TENANT)
    assert decision is not None and decision.node == "gpu-a"
    # ... and may not change it afterwards
    patch = {"metadata": {"annotations": {DECISION_ANNOTATION: None}}}
    message = eventually_refused(lambda: tenant.patch(Pod, "honest", patch, namespace=TENANT), 0)
    assert "may not remove the annotation" in message, message
    _victim_unharmed(cluster, victim)
    for name in ("plain", "honest"):
        tenant.delete(Pod, name, namespace=TENANT, grace_period=0)


def test_no_other_namespace_may_reset_the_victims_gpu(cluster: Cluster, victim: str) -> None:
    """Its GPU is served through the device plugin as an anonymous unit: "in use" all the
    same, and a namespace no policy grants the GPU may not operate on it at all."""
    client = cluster.client
    name = _accelerator(client, "gpu-b", victim)["metadata"]["name"]
    ctl = Controller(
        cluster.testbed.client(field_manager="kubeacc-controller"),
        identity="tenancy",
        lease_namespace="kube-system",  # the admin namespace
        lease_name=f"kubeacc-tenancy-{uuid.uuid4().hex[:5]}",
        interval=0.3,
    )
    ops = {TENANT: "reset-theirs", "kube-system": "reset-busy"}
    with running(ctl):
        for ns, op in ops.items():  # the tenant's as if RBAC let the team create operations
            create_operation(client, ns, op, {"action": "Reset", "targets": [name]})
        done = {
            ns: wait_for(op, partial(operation_finished, client, ns, op), 60)
            for ns, op in ops.items()
        }
    try:
        reason, message = _refusal(done[TENANT])
        assert reason == "NamespaceNotAllowed", message
        assert f"grants namespace {TENANT} operations" in message, message
        reason, message = _refusal(done["kube-system"])
        assert reason == "DeviceInUse" and f"{VICTIM}/holder" in message, message
        _victim_unharmed(cluster, victim)
    finally:
        for ns, op in ops.items():
            client.delete(AcceleratorOperation, op, namespace=ns)


def test_without_the_policy_forged_decisions_get_no_gpu(
    cluster: Cluster, tenant: Client, victim: str
) -> None:
    """The second fence: a cluster installed without the policy (or a decision written around
    it) still gives a forged decision nothing, and the extender does not count it."""
    client = cluster.client
    client.delete(ValidatingAdmissionPolicyBinding, POLICY)
    try:
        forged = {
            # (amounts differ: Allocate carries no pod, the plugin matches containers by amount)
            # the victim's GPU, whole, for a 2 MiB request
            "whole": ({MEMORY: "2"}, Decision("gpu-b", (Assigned("main", (victim,), whole=True),))),
            # a well-formed 1 MiB share of the GPU the victim holds whole
            "share": ({MEMORY: "1"}, Decision("gpu-b", (Assigned("main", (victim,), memory=1),))),
        }

        def create(name: str, limits: dict[str, str], decision: Decision) -> bool:
            try:
                tenant.create(_pod(name, TENANT, limits, decision, nodeName=decision.node))
            except ApiError as err:  # the policy's binding may take a moment to go
                assert err.status.code == 403, err.status
                return False
            return True

        for name, (limits, decision) in forged.items():
            eventually(partial(create, name, limits, decision), 30, "policy gone")
        refusals = {n: eventually(partial(_failed, tenant, n), 60, f"{n} refused") for n in forged}
        assert "asks for a share of one GPU, decided whole GPUs" in refusals["whole"], refusals
        assert "is held by another pod" in refusals["share"], refusals
        # negative shares on gpu-a: the extender must not count 75,000 MiB free that is not
        gpus = sorted(_gpu_use(cluster, "gpu-a"))
        negative = Decision("gpu-a", (Assigned("main", (gpus[0],), memory=-75000, cores=-90),))
        eventually(lambda: create("negative", {MEMORY: "1"}, negative), 30, "negative created")
        eventually(lambda: _failed(tenant, "negative"), 60, "negative refused")
        use = _gpu_use(cluster, "gpu-a")
        assert all(g["used"]["memory"] == 0 for g in use.values()), use
        # two honest 20,000 MiB shares: one per L4 of gpu-a, a third finds no room
        for i in range(3):
            client.create(_pod(f"share-{i}", VICTIM, {MEMORY: "20000"}))
        eventually(
            lambda: sum(_phase(client, f"share-{i}", VICTIM) == "Running" for i in range(3)) == 2,
            120,
            "two shares running",
        )
        use = _gpu_use(cluster, "gpu-a")
        assert all(g["used"]["memory"] <= L4_MIB for g in use.values()), use
        _victim_unharmed(cluster, victim)
    finally:
        apply_manifest(client, "admission/extender-decisions.yaml")
        for p in client.list(Pod, namespace=TENANT):
            assert p.metadata is not None and p.metadata.name is not None
            client.delete(Pod, p.metadata.name, namespace=TENANT, grace_period=0)
        for i in range(3):
            with contextlib.suppress(ApiError):
                client.delete(Pod, f"share-{i}", namespace=VICTIM, grace_period=0)


def _edited(tenant: Client, name: str, patch: dict[str, Any]) -> bool:
    """The tenant's patch of its own pod, False while the policy is still loaded."""
    try:
        tenant.patch(Pod, name, patch, namespace=TENANT)
    except ApiError as err:
        assert err.status.code == 403, err.status
        return False
    return True


def _unschedulable(client: Client, name: str, namespace: str) -> str | None:
    for c in (_get(client, name, namespace).get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or "unschedulable")
    return None


def _settled(client: Client, names: tuple[str, ...]) -> dict[str, str] | None:
    """Each pod's fate once every one is running or refused by the scheduler."""
    out = {}
    for name in names:
        if _phase(client, name, VICTIM) == "Running":
            out[name] = "Running"
        elif _unschedulable(client, name, VICTIM):
            out[name] = "Unschedulable"
        else:
            return None
    return out


def _gone(client: Client, namespace: str, but: tuple[str, ...] = ()) -> bool:
    """No pod of ``namespace`` is left but those named ``but``."""
    pods = [p.metadata.name for p in client.list(Pod, namespace=namespace) if p.metadata]
    return not [n for n in pods if n not in but]


SHARES = ("v-1", "v-2")


@contextlib.contextmanager
def _tenant_share(
    cluster: Cluster, tenant: Client, mine: str
) -> Iterator[tuple[Decision, str, str]]:
    """Policy off, the tenant's 20,000 MiB share (pod ``mine``) running on one L4 of gpu-a:
    yields its decision, that GPU and gpu-a's other L4; then the policy back, the pods gone."""
    client = cluster.client
    eventually(lambda: _gone(client, TENANT) and _gone(client, VICTIM, ("holder",)), 60, "gone")
    # Allocate names no pod: one of an earlier test that the kubelet admits as it is deleted
    # would take the decision of the tenant's pod (the same amount) in its place
    time.sleep(2)
    client.delete(ValidatingAdmissionPolicyBinding, POLICY)
    try:
        tenant.create(_pod(mine, TENANT, {MEMORY: "20000"}))
        eventually(lambda: _phase(tenant, mine, TENANT) == "Running", 120, "tenant's share")
        decided = _decision(tenant, mine, TENANT)
        assert decided is not None and decided.node == "gpu-a"
        (held,) = decided.containers[0].devices
        (record,) = cluster.testbed.node("gpu-a").container_records(namespace=TENANT, pod=mine)
        assert record.envs["ACCELERATOR_UNITS"] == held
        (other,) = [b for b in _gpu_use(cluster, "gpu-a") if b != held]
        yield decided, held, other
        # what counted: the extender's record, kept through the kubelet's status updates
        conditions = _get(tenant, mine, TENANT)["status"]["conditions"]
        (kept,) = [c for c in conditions if c["type"] == DECISION_CONDITION]
        assert Decision.from_json(kept["message"]) == decided
    finally:
        apply_manifest(client, "admission/extender-decisions.yaml")
        with contextlib.suppress(ApiError):
            client.delete(Pod, mine, namespace=TENANT, grace_period=0)
        for name in SHARES:
            with contextlib.suppress(ApiError):
                client.delete(Pod, name, namespace=VICTIM, grace_period=0)


def _placed(cluster: Cluster, name: str) -> str:
    """The GPU a victim's running share was decided, checked against what its container got."""
    got = _decision(cluster.client, name, VICTIM)
    assert got is not None
    (bdf,) = got.containers[0].devices
    # the newest: a pod of that name may have run before (the device plugin forgets it)
    record = cluster.testbed.node("gpu-a").container_records(namespace=VICTIM, pod=name)[-1]
    assert record.envs["ACCELERATOR_UNITS"] == bdf
    return bdf


def test_without_the_policy_a_decision_the_tenant_removes_still_counts(
    cluster: Cluster, tenant: Client, victim: str
) -> None:
    """The second fence for a decision a tenant removes from its own running pod (issue 43):
    the extender keeps counting the GPU share, also after a restart, so another namespace's
    share goes to the other GPU and a second one is refused, never put on top of the
    tenant's."""
    client = cluster.client
    mine = "removes"
    with _tenant_share(cluster, tenant, mine) as (_, held, other):
        removal: dict[str, Any] = {"metadata": {"annotations": {DECISION_ANNOTATION: None}}}
        eventually(lambda: _edited(tenant, mine, removal), 30, "policy gone")
        assert _decision(tenant, mine, TENANT) is None
        time.sleep(3)  # the extender's watch has seen the edit
        # ... and a new extender (restarted, or a replica taking over) knows only the API server
        cluster.extender.kill()
        cluster.extender.start()
        for name in SHARES:
            client.create(_pod(name, VICTIM, {MEMORY: "20000"}))
        fate = eventually(lambda: _settled(client, SHARES), 120, "victim's shares settled")
        # (a third 20,000 MiB on gpu-a is over the node's 46,068 advertised MiB: the kubelet's
        # own count refuses it whatever the extender decides)
        assert sorted(fate.values()) == ["Running", "Unschedulable"], fate
        (placed,) = [n for n, f in fate.items() if f == "Running"]
        bdf = _placed(cluster, placed)
        assert bdf == other, f"the victim's 20,000 MiB share was put on the tenant's GPU {bdf}"
        use = _gpu_use(cluster, "gpu-a")
        assert use[held]["used"]["memory"] == use[other]["used"]["memory"] == 20000, use
        _victim_unharmed(cluster, victim)


def test_without_the_policy_a_decision_the_tenant_changes_still_counts(
    cluster: Cluster, tenant: Client, victim: str
) -> None:
    """The same for a decision the tenant points at the node's other GPU: the extender keeps
    the GPU it decided, so another namespace's share goes to the GPU the tenant named."""
    client = cluster.client
    mine = "changes"
    with _tenant_share(cluster, tenant, mine) as (decided, held, other):
        moved = Decision("gpu-a", (Assigned("main", (other,), memory=20000),), at=decided.at)
        change = {"metadata": {"annotations": {DECISION_ANNOTATION: moved.to_json()}}}
        eventually(lambda: _edited(tenant, mine, change), 30, "policy gone")
        assert _decision(tenant, mine, TENANT) == moved
        time.sleep(3)
        client.create(_pod(SHARES[0], VICTIM, {MEMORY: "20000"}))
        eventually(lambda: _phase(client, SHARES[0], VICTIM) == "Running", 120, "victim's share")
        bdf = _placed(cluster, SHARES[0])
        assert bdf == other, f"the victim's 20,000 MiB share was put on the tenant's GPU {bdf}"
        use = _gpu_use(cluster, "gpu-a")
        assert use[held]["used"]["memory"] == use[other]["used"]["memory"] == 20000, use
        _victim_unharmed(cluster, victim)
