"""Gang jobs on kube-acc's DRA devices under a real Volcano: a Job of 4 pods (minAvailable 4),
each with a ResourceClaimTemplate of 2 ``gpu.kubeacc.io`` H100s on one PCIe root, is placed all
at once by vc-scheduler, its claims allocated from kube-acc's ResourceSlices and prepared by the
agent of each pod's node; with only 3 pods' worth of such pairs free, none of the 4 is bound and
no claim of the gang holds a device, until the fourth pair frees."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from tests.agent.dra.test_e2e import claim_obj
from tests.nodestack import claim_pod

from ..testbed.helpers import eventually
from .conftest import (
    PodGroup,
    VcJob,
    allocated_claims,
    claim_template,
    job_pods,
    job_running,
    pod_claims,
    pod_spec,
    vcjob,
    wait_no_allocations,
)

pytestmark = pytest.mark.cluster

H100 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")'
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: 2 H100s on one PCIe root: one per pod of the gang
PAIR: dict[str, Any] = {
    "devices": {
        "requests": [
            {
                "name": "gpus",
                "exactly": {
                    "deviceClassName": "gpu.kubeacc.io",
                    "count": 2,
                    "selectors": [{"cel": {"expression": H100}}],
                },
            }
        ],
        "constraints": [{"matchAttribute": PCIE_ROOT}],
    }
}
GANG = 4


def _gang(ns: str, name: str = "train") -> Any:
    claims = [{"name": "gpus", "resourceClaimTemplateName": "h100-pair"}]
    return vcjob(name, ns, [{"name": "worker", "replicas": GANG, "pod": pod_spec(claims)}], GANG)


def _pcie_roots(client: Client) -> dict[tuple[str, str], str]:
    """(pool, device) -> the device's PCIe root, from kube-acc's slices."""
    roots = {}
    for s in client.list(ResourceSlice, fields={"spec.driver": DRIVER_NAME}):
        spec = as_dict(s)["spec"]
        for d in spec.get("devices") or []:
            root = (d.get("attributes") or {}).get(PCIE_ROOT, {}).get("string")
            if root:
                roots[(spec["pool"]["name"], d["name"])] = root
    return roots


def test_gang_of_four_two_gpu_pods_is_placed_and_prepared(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    wait_no_allocations(client)
    client.create(claim_template("h100-pair", ns, PAIR))
    client.create(_gang(ns))
    eventually(lambda: job_running(client, ns, "train", GANG), 180, "the gang's 4 pods Running")

    roots = _pcie_roots(client)
    nodes = []
    for pod in job_pods(client, ns, "train"):
        assert pod.spec and pod.metadata and pod.metadata.uid
        assert pod.spec.schedulerName == "volcano"
        node = pod.spec.nodeName
        assert node is not None
        nodes.append(node)
        (claim,) = pod_claims(client, pod)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 2, results
        assert {r["pool"] for r in results} == {node}
        assert len({roots[(node, r["device"])] for r in results}) == 1, results
        # prepared by the agent of the pod's node (and no other), handed to the container
        for name, components in stack.nodes.items():
            prepared = claim["metadata"]["uid"] in components.agent.driver.prepared()
            assert prepared == (name == node), (pod.metadata.name, name)
        (record,) = stack.testbed.node(node).container_records(namespace=ns, pod=pod.metadata.name)
        assert any(d.startswith("kubeacc.io/") for d in record.cdi_devices), record
    # 3 pairs on gpu-server (its eighth H100 is in MIG mode), the fourth on h100-l4
    assert sorted(nodes) == ["gpu-server"] * 3 + ["h100-l4"]
    (group,) = [as_dict(g) for g in client.list(PodGroup, namespace=ns)]
    assert group["spec"]["minMember"] == GANG
    assert group["status"]["phase"] == "Running"


def _hold_one_pair(client: Client, ns: str) -> None:
    """One H100 pair taken by a pod kube-scheduler places: 3 pods' worth of pairs stay free."""
    client.create(claim_obj("holder", ns, PAIR))
    client.create(claim_pod("holder", ns, "holder"))
    eventually(
        lambda: (
            (p := client.get(Pod, "holder", namespace=ns)).status and p.status.phase == "Running"
        ),
        90,
        "the holder pod Running",
    )


def _three_pairs_free(stack: KubeaccStack, ns: str) -> Client:
    """The pair template in ``ns`` and one pair held: 3 pods' worth of pairs stay free."""
    client = stack.client("kubeacc-test")
    wait_no_allocations(client)
    client.create(claim_template("h100-pair", ns, PAIR))
    _hold_one_pair(client, ns)
    return client


def _bound(client: Client, ns: str) -> list[str]:
    pods = job_pods(client, ns, "train")
    return [str(p.metadata.name) for p in pods if p.spec and p.spec.nodeName and p.metadata]


def test_gang_with_three_pods_worth_free_starts_none(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    ns = volcano_namespace
    client = _three_pairs_free(kubeacc_volcano, ns)
    client.create(_gang(ns))

    def gang_refused() -> dict[str, Any] | None:
        groups = [as_dict(g) for g in client.list(PodGroup, namespace=ns)]
        if not groups:
            return None
        conditions = groups[0].get("status", {}).get("conditions") or []
        unschedulable = [c for c in conditions if c.get("type") == "Unschedulable"]
        return groups[0] if unschedulable else None

    group = eventually(gang_refused, 120, "Volcano to find the gang unschedulable")
    # Many scheduling cycles (200 ms each): never a partial gang.
    end = time.monotonic() + 15
    while time.monotonic() < end:
        assert not _bound(client, ns), "pods of an incomplete gang were bound"
        held = [c for c in allocated_claims(client) if c != f"{ns}/holder"]
        assert not held, f"claims of an incomplete gang hold devices: {held}"
        time.sleep(0.5)
    assert len(job_pods(client, ns, "train")) == GANG
    assert group["status"].get("running", 0) == 0

    # The fourth pair frees: the whole gang starts.
    client.delete(Pod, "holder", namespace=ns, grace_period=0)
    eventually(lambda: job_running(client, ns, "train", GANG), 180, "the gang Running once freed")


def test_pods_asking_only_claims_are_best_effort_to_volcano_and_escape_the_gang(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    """Volcano counts CPU, memory and extended resources, not DRA claims: a pod whose only
    request is a claim is BestEffort to it, and its ``backfill`` action binds such pods one by
    one, gang or not (docs/choosing.md, "With Volcano"). Why every gang pod asks some CPU."""
    ns = volcano_namespace
    client = _three_pairs_free(kubeacc_volcano, ns)
    claims = [{"name": "gpus", "resourceClaimTemplateName": "h100-pair"}]
    spec = pod_spec(claims, best_effort=True)
    client.create(vcjob("train", ns, [{"name": "worker", "replicas": GANG, "pod": spec}], GANG))
    bound = eventually(lambda: _bound(client, ns), 120, "backfill to bind claim-only pods")
    time.sleep(3)
    bound = _bound(client, ns)
    assert 0 < len(bound) < GANG, bound


def test_gang_pods_sharing_one_claim_are_placed_only_one_by_one(
    kubeacc_volcano: KubeaccStack, volcano_namespace: str
) -> None:
    """Two pods naming the same ResourceClaim: as one gang (minAvailable 2) Volcano never
    places them, because its DRA filter refuses the second pod while the claim is "in the
    process of being allocated" for the first in the same session, so the gang is never ready
    and the claim stays unallocated; with minAvailable 1 the first pod's placement allocates the
    claim and the second follows it to that node (one claim reserved for both, prepared once).
    docs/choosing.md, "With Volcano": a gang splits devices by claim template, and shares a
    claim only among pods it does not need at once."""
    stack, ns = kubeacc_volcano, volcano_namespace
    client = stack.client("kubeacc-test")
    wait_no_allocations(client)
    client.create(claim_obj("pair", ns, PAIR))
    spec = pod_spec([{"name": "gpus", "resourceClaimName": "pair"}])
    client.create(vcjob("gang", ns, [{"name": "w", "replicas": 2, "pod": spec}], 2))
    eventually(lambda: len(job_pods(client, ns, "gang")) == 2, 60, "the gang's pods")
    end = time.monotonic() + 15
    while time.monotonic() < end:
        bound = [
            p.metadata.name
            for p in job_pods(client, ns, "gang")
            if p.spec and p.spec.nodeName and p.metadata
        ]
        assert not bound, bound
        assert not allocated_claims(client), "the shared claim was allocated"
        time.sleep(0.5)
    log = (stack.testbed.logs_dir / "vc-scheduler.log").read_text(errors="replace")
    assert f"resource claim {ns}/pair is in the process of being allocated" in log
    client.delete(VcJob, "gang", namespace=ns)
    eventually(lambda: not job_pods(client, ns, "gang"), 60, "the gang's pods gone")

    client.create(vcjob("pair", ns, [{"name": "w", "replicas": 2, "pod": spec}], 1))
    eventually(lambda: job_running(client, ns, "pair", 2), 120, "both pods Running")
    pods = job_pods(client, ns, "pair")
    (node,) = {p.spec.nodeName for p in pods if p.spec}
    claim = as_dict(client.get(ResourceClaim, "pair", namespace=ns))
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {node} and len(results) == 2
    reserved = {r["name"] for r in claim["status"]["reservedFor"]}
    assert reserved == {p.metadata.name for p in pods if p.metadata}
    for name, components in stack.nodes.items():
        prepared = claim["metadata"]["uid"] in components.agent.driver.prepared()
        assert prepared == (name == node), name
