"""DRA on the testbed: the real scheduler allocates devices from our ResourceSlice."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.testbed import Testbed

from .helpers import eventually

pytestmark = pytest.mark.cluster

DRIVER = "test.kubeacc.io"
#: name -> (model, NUMA node)
DEVICES = {
    "gpu-0": ("a100", 0),
    "gpu-1": ("v100", 0),
    "gpu-2": ("a100", 1),
    "gpu-3": ("a100", 1),
}


@dataclass
class Pool:
    name: str
    device_class: str


@pytest.fixture
def pool(testbed: Testbed, kube_client: Client) -> Pool:
    """A ResourceSlice with four GPUs on the kubelet's node and a DeviceClass selecting them.

    The pool name is unique per test, so claims of earlier tests that are still being deleted
    cannot hold devices this test wants.
    """
    suffix = uuid.uuid4().hex[:6]
    p = Pool(name=f"{testbed.node_name}-{suffix}", device_class=f"gpu-{suffix}.{DRIVER}")
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{p.name}-slice"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": testbed.node_name,
                    "pool": {"name": p.name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": name,
                            "attributes": {
                                "type": {"string": "gpu"},
                                "model": {"string": model},
                                "numaNode": {"int": numa},
                                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{numa}0"},
                            },
                            "capacity": {"memory": {"value": "40Gi"}},
                        }
                        for name, (model, numa) in DEVICES.items()
                    ],
                },
            }
        )
    )
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": p.device_class},
                "spec": {
                    "selectors": [
                        {
                            "cel": {
                                "expression": f'device.driver == "{DRIVER}" && '
                                f'device.attributes["{DRIVER}"].type == "gpu"'
                            }
                        }
                    ]
                },
            }
        )
    )
    return p


def _claim_spec(device_class: str, model: str, count: int) -> dict[str, Any]:
    model_is = f'device.attributes["{DRIVER}"].model == "{model}"'
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": device_class,
                        "allocationMode": "ExactCount",
                        "count": count,
                        "selectors": [{"cel": {"expression": model_is}}],
                    },
                }
            ],
            "constraints": [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/numaNode"}],
        }
    }


def _pod(name: str, namespace: str, claim: dict[str, str]) -> Any:
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "resourceClaims": [{"name": "gpu", **claim}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        }
    )


def _allocated_devices(claim: ResourceClaim) -> list[tuple[str, str, str]] | None:
    alloc = claim.status.allocation if claim.status else None
    if alloc is None or alloc.devices is None:
        return None
    return sorted((r.driver, r.pool, r.device) for r in alloc.devices.results or [])


def _wait_allocated(client: Client, name: str, namespace: str) -> ResourceClaim:
    def probe() -> ResourceClaim | None:
        c = client.get(ResourceClaim, name, namespace=namespace)
        return c if _allocated_devices(c) else None

    return eventually(probe, 60, f"allocation of claim {name}")


def test_scheduler_allocates_claim_and_binds_pod(
    testbed: Testbed, kube_client: Client, namespace: str, pool: Pool
) -> None:
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "two-a100", "namespace": namespace},
                "spec": _claim_spec(pool.device_class, "a100", 2),
            }
        )
    )
    kube_client.create(_pod("trainer", namespace, {"resourceClaimName": "two-a100"}))

    claim = _wait_allocated(kube_client, "two-a100", namespace)
    # Two A100s on the same NUMA node exist only on NUMA 1.
    assert _allocated_devices(claim) == [
        (DRIVER, pool.name, "gpu-2"),
        (DRIVER, pool.name, "gpu-3"),
    ]
    assert claim.status is not None and claim.status.allocation is not None
    selector = claim.status.allocation.nodeSelector
    assert selector is not None
    assert testbed.node_name in str(selector.to_dict())
    assert [r.name for r in claim.status.reservedFor or []] == ["trainer"]

    def bound() -> Pod | None:
        p = kube_client.get(Pod, "trainer", namespace=namespace)
        return p if p.spec is not None and p.spec.nodeName else None

    pod = eventually(bound, 60, "pod bound")
    assert pod.spec is not None and pod.spec.nodeName == testbed.node_name


def test_claim_template_is_instantiated_and_allocated(
    kube_client: Client, namespace: str, pool: Pool
) -> None:
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-v100", "namespace": namespace},
                "spec": {"spec": _claim_spec(pool.device_class, "v100", 1)},
            }
        )
    )
    kube_client.create(_pod("inference", namespace, {"resourceClaimTemplateName": "one-v100"}))

    def generated_claim() -> str | None:
        p = kube_client.get(Pod, "inference", namespace=namespace)
        statuses = (p.status.resourceClaimStatuses if p.status else None) or []
        return statuses[0].resourceClaimName if statuses else None

    # The controller manager's resourceclaim controller creates the claim from the template.
    name = eventually(generated_claim, 60, "claim generated from template")
    claim = _wait_allocated(kube_client, name, namespace)
    assert _allocated_devices(claim) == [(DRIVER, pool.name, "gpu-1")]


def test_unsatisfiable_claim_leaves_pod_unschedulable(
    kube_client: Client, namespace: str, pool: Pool
) -> None:
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "h100", "namespace": namespace},
                "spec": _claim_spec(pool.device_class, "h100", 1),
            }
        )
    )
    kube_client.create(_pod("wants-h100", namespace, {"resourceClaimName": "h100"}))

    def unschedulable() -> str | None:
        p = kube_client.get(Pod, "wants-h100", namespace=namespace)
        for c in (p.status.conditions if p.status else None) or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message or "unschedulable"
        return None

    message = eventually(unschedulable, 60, "PodScheduled=False")
    assert "claim" in message.lower() or "device" in message.lower(), message
    claim = kube_client.get(ResourceClaim, "h100", namespace=namespace)
    assert _allocated_devices(claim) is None
