"""``kubeacc plan`` against the real kube-scheduler for a pod asking an extended resource that a
DeviceClass serves through DRA: the plan names the devices (and requests) the scheduler then
allocates in the claim it creates for the pod."""

from __future__ import annotations

import json
import uuid

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType
from typer.testing import CliRunner

from kubeacc.cli.main import app
from kubeacc.testbed.testbed import Testbed

from ..testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def test_plan_names_the_devices_the_scheduler_allocates_for_a_gpu_limit(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    driver, cls, resource = f"x{tag}.kubeacc.io", f"gpu-{tag}", f"x{tag}.kubeacc.io/gpu"
    node = testbed.node_name
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(4)]
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{cls}-slice"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": f"{node}-{tag}", "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
    )
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": cls},
                "spec": {
                    # gpu-0 is not in the class: the first fit starts at gpu-1
                    "selectors": [
                        {
                            "cel": {
                                "expression": f'device.driver == "{driver}" && '
                                f'device.attributes["{driver}"].index > 0'
                            }
                        }
                    ],
                    "extendedResourceName": resource,
                },
            }
        )
    )

    def container(name: str, count: int) -> dict[str, object]:
        return {"name": name, "image": "x", "resources": {"limits": {resource: str(count)}}}

    # Gated: the scheduler leaves it alone until the plan is made.
    kube_client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "gpus", "namespace": namespace},
                "spec": {
                    "schedulingGates": [{"name": "kubeacc.io/plan-first"}],
                    "containers": [container("one", 1), container("two", 2)],
                },
            }
        )
    )
    result = CliRunner().invoke(
        app,
        ["plan", "--kubeconfig", str(testbed.kubeconfig), "--namespace", namespace, "-o", "json"],
    )
    assert result.exit_code == 0, result.output
    (planned,) = json.loads(result.stdout)
    assert planned["claim"] == f"{namespace}/gpus-extended-resources"
    assert planned["allocated"] and planned["node"] == node
    want = sorted((r["request"], r["device"]) for r in planned["allocation"]["devices"]["results"])
    assert [d for _, d in want] == ["gpu-1", "gpu-2", "gpu-3"]

    ungate = [{"op": "remove", "path": "/spec/schedulingGates"}]
    kube_client.patch(Pod, "gpus", ungate, namespace=namespace, patch_type=PatchType.JSON)

    def claim_name() -> str | None:
        status = kube_client.get(Pod, "gpus", namespace=namespace).status
        ext = status.extendedResourceClaimStatus if status else None
        return ext.resourceClaimName if ext else None

    eventually(lambda: claim_name() is not None, 60, "the scheduler's extended-resource claim")
    name = claim_name()
    assert name is not None and name.startswith("gpus-extended-resources-")
    claim = kube_client.get(ResourceClaim, name, namespace=namespace)
    assert claim.status is not None and claim.status.allocation is not None
    got = sorted((r.request, r.device) for r in claim.status.allocation.devices.results)
    assert got == want
    status = kube_client.get(Pod, "gpus", namespace=namespace).status
    assert status is not None and status.extendedResourceClaimStatus is not None
    mappings = [
        {
            "containerName": m.containerName,
            "resourceName": m.resourceName,
            "requestName": m.requestName,
        }
        for m in status.extendedResourceClaimStatus.requestMappings
    ]
    assert mappings == planned["extendedResources"]["requestMappings"]
