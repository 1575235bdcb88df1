"""``kubeacc plan --kubeconfig``: plans the pending claims of a live (testbed) cluster."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.resource_v1 import ResourceClaim
from typer.testing import CliRunner

from kubeacc.cli.main import app
from kubeacc.cli.plan import _release, server_version
from kubeacc.engine.release import release
from kubeacc.testbed.testbed import Testbed

from ..testbed.helpers import eventually

pytestmark = pytest.mark.cluster
DRIVER = "plan.kubeacc.io"


def _claim(name: str, namespace: str, count: int) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "plan-gpu", "count": count}}
                ]
            }
        },
    }


def _three_devices(client: Client, node: str, driver: str, device_class: str) -> None:
    """A ResourceSlice of three devices on ``node`` and a DeviceClass selecting them."""
    client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{device_class}-slice"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{i}"} for i in range(3)],
                },
            }
        )
    )
    client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
            }
        )
    )


def test_plan_reads_the_cluster(testbed: Testbed, kube_client: Client, namespace: str) -> None:
    node = testbed.node_name
    _three_devices(kube_client, node, DRIVER, "plan-gpu")
    kube_client.create(from_dict(_claim("fits", namespace, 2)))
    kube_client.create(from_dict(_claim("too-big", namespace, 4)))
    result = CliRunner().invoke(
        app,
        ["plan", "--kubeconfig", str(testbed.kubeconfig), "--namespace", namespace, "-o", "json"],
    )
    assert result.exit_code == 1, result.output  # one claim can't be placed
    placements = {p["claim"].split("/")[-1]: p for p in json.loads(result.stdout)}
    assert placements["fits"]["allocated"] is True
    assert placements["fits"]["node"] == node
    assert len(placements["fits"]["allocation"]["devices"]["results"]) == 2
    assert placements["too-big"]["allocated"] is False
    assert "need 4" in json.dumps(placements["too-big"]["explanation"])


def test_plan_of_one_namespace_counts_claims_of_all_others(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    """Devices another namespace's claim holds are not free for the planned namespace."""
    node = testbed.node_name
    driver = f"plan-{uuid.uuid4().hex[:6]}.kubeacc.io"
    cls = f"plan-gpu-{uuid.uuid4().hex[:6]}"
    _three_devices(kube_client, node, driver, cls)
    other = f"{namespace}-other"
    kube_client.create(Namespace(metadata=ObjectMeta(name=other)))
    held = _claim("held", other, 2)
    held["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = cls  # type: ignore[index]
    kube_client.create(from_dict(held))
    # The real scheduler allocates the other namespace's claim for its pod (no driver runs it).
    kube_client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "holder", "namespace": other},
                "spec": {
                    "resourceClaims": [{"name": "c", "resourceClaimName": "held"}],
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"claims": [{"name": "c"}]}}
                    ],
                },
            }
        )
    )

    def allocated() -> bool:
        claim = kube_client.get(ResourceClaim, "held", namespace=other)
        return bool(claim.status and claim.status.allocation)

    eventually(allocated, 60, "the other namespace's claim allocated by the scheduler")
    mine = _claim("mine", namespace, 2)
    mine["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = cls  # type: ignore[index]
    kube_client.create(from_dict(mine))
    result = CliRunner().invoke(
        app,
        ["plan", "--kubeconfig", str(testbed.kubeconfig), "--namespace", namespace, "-o", "json"],
    )
    assert result.exit_code == 1, result.output
    (placement,) = json.loads(result.stdout)
    assert placement["claim"].endswith("/mine")
    assert placement["allocated"] is False, "2 of the 3 devices are held in another namespace"
    # Who holds them: the other namespace's claim, for its pod, through DRA.
    result = CliRunner().invoke(
        app, ["plan", "--kubeconfig", str(testbed.kubeconfig), "--held", "-n", other, "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    held_rows = json.loads(result.stdout)
    assert len(held_rows) == 2
    for row in held_rows:
        assert (row["node"], row["claim"], row["pods"], row["path"]) == (
            node,
            f"{other}/held",
            [f"{other}/holder"],
            "DRA",
        )
    assert {r["device"] for r in held_rows} < {"gpu-0", "gpu-1", "gpu-2"}


def test_plan_follows_the_api_servers_release(testbed: Testbed) -> None:
    # the engine is built for the release the cluster runs (the testbed's lane)
    served = server_version(testbed.kubeconfig, None)
    assert served is not None and served.startswith(f"v{release(served).name}.")
    assert _release(None, None, testbed.kubeconfig, None) == release(served)


def test_plan_takes_a_folder_or_a_cluster_not_both(testbed: Testbed, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["plan", str(tmp_path), "--kubeconfig", str(testbed.kubeconfig)]
    )
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_plan_reads_the_clusters_device_taint_rules(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    # kube-scheduler treats a device a DeviceTaintRule selects (NoSchedule) as tainted
    from kubeacc.controller.taintrules import DeviceTaintRule

    node, driver = testbed.node_name, "taint.plan.kubeacc.io"
    _three_devices(kube_client, node, driver, "plan-taint-gpu")
    rule = f"plan-taint-{uuid.uuid4().hex[:8]}"
    kube_client.create(
        DeviceTaintRule.from_dict(  # type: ignore[attr-defined]
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": rule},
                "spec": {
                    "deviceSelector": {"driver": driver, "device": "gpu-0"},
                    "taint": {"key": "drain", "effect": "NoSchedule"},
                },
            }
        )
    )
    try:
        claim = _claim("three", namespace, 3)
        claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "plan-taint-gpu"  # type: ignore[index]
        kube_client.create(from_dict(claim))
        argv = ["plan", "--kubeconfig", str(testbed.kubeconfig), "-n", namespace, "-o", "json"]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 1, result.output
        (placement,) = json.loads(result.stdout)
        assert placement["allocated"] is False
        assert "taint" in json.dumps(placement["explanation"])
    finally:
        kube_client.delete(DeviceTaintRule, rule)


def test_plan_of_a_volcano_pod_on_a_cluster_without_volcano_says_so(
    testbed: Testbed, kube_client: Client, namespace: str
) -> None:
    """A pod naming ``schedulerName: volcano`` where Volcano's CRDs are not installed: the
    plan asks the cluster for its PodGroup, is told the API is not served, and says so (the
    pod stays pending: no scheduler here is named volcano)."""
    cls = f"plan-vc-{uuid.uuid4().hex[:6]}"
    _three_devices(kube_client, testbed.node_name, f"{cls}.kubeacc.io", cls)
    claim = _claim("w0", namespace, 2)
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = cls  # type: ignore[index]
    kube_client.create(from_dict(claim))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-w-0",
            "namespace": namespace,
            "annotations": {"scheduling.k8s.io/group-name": "train"},
        },
        "spec": {
            "schedulerName": "volcano",
            "resourceClaims": [{"name": "c", "resourceClaimName": "w0"}],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "c"}]}}],
        },
    }
    kube_client.create(from_dict(pod))
    result = CliRunner().invoke(
        app, ["plan", "--kubeconfig", str(testbed.kubeconfig), "-n", namespace, "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    (placement,) = json.loads(result.stdout)
    assert placement["allocated"] is True and placement["pod"] == f"{namespace}/train-w-0"
    why = "PodGroups (scheduling.volcano.sh/v1beta1) are not served by this cluster"
    assert why in result.stderr
    said = "\n".join(placement["scheduler"]["notPredicted"])
    assert f"gang {namespace}/train: bound together with its minMember pods" in said
    assert f"(its PodGroup unknown: {why}" in said
