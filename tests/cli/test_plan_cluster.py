"""``kubeacc plan --kubeconfig``: plans the pending claims of a live (testbed) cluster."""

from __future__ import annotations

import json

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from typer.testing import CliRunner

from kubeacc.cli.main import app
from kubeacc.testbed.testbed import Testbed

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


def test_plan_reads_the_cluster(testbed: Testbed, kube_client: Client, namespace: str) -> None:
    node = testbed.node_name
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "plan-slice"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{i}"} for i in range(3)],
                },
            }
        )
    )
    kube_client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "plan-gpu"},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    )
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


def test_plan_needs_exactly_one_source() -> None:
    result = CliRunner().invoke(app, ["plan"])
    assert result.exit_code == 2
