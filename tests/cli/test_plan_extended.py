"""kubeacc plan for pods asking extended resources that DeviceClasses serve through DRA."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

from kubeacc.cli.plan import plan
from tests.engine.helpers import device_class, gpu, slice_

GPU = "kubeacc.io/gpu"


def gpu_pod(name: str, count: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "x", "resources": {"limits": {GPU: count}}}]
    }
    if node:
        spec["nodeName"] = node
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def node(name: str, allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", **(allocatable or {})}},
    }


def run(tmp_path: Path, docs: list[dict[str, Any]], *args: str) -> tuple[int, str]:
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), *args])
    return res.exit_code, res.stdout


def gpu_class() -> dict[str, Any]:
    c = device_class()
    c["spec"]["extendedResourceName"] = GPU
    return c


def test_plan_places_a_pods_gpu_limit_through_dra(tmp_path: Path) -> None:
    docs = [
        slice_("a", [gpu("gpu-0")]),
        slice_("b", [gpu("gpu-0"), gpu("gpu-1")]),
        gpu_class(),
        node("a"),
        node("b"),
        gpu_pod("two", "2"),
        gpu_pod("more", "2"),
    ]
    code, out = run(tmp_path, docs, "-o", "json")
    assert code == 1
    got = json.loads(out)
    assert [(o["claim"], o["allocated"]) for o in got] == [
        ("default/two-extended-resources", True),
        ("default/more-extended-resources", False),
    ]
    assert got[0]["node"] == "b" and got[0]["pod"] == "default/two"
    results = got[0]["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [
        ("container-0-request-0", "gpu-0"),
        ("container-0-request-0", "gpu-1"),
    ]
    assert got[0]["extendedResources"]["requestMappings"] == [
        {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}
    ]
    why = json.dumps(got[1]["explanation"])
    assert "request container-0-request-0" in why and "0 free, need 2" in why
    _, table = run(tmp_path, docs)
    assert "default/two-extended-resources" in table and "b" in table


def test_plan_leaves_a_device_plugin_node_to_its_plugin(tmp_path: Path) -> None:
    docs = [
        gpu_class(),
        node("dp", {GPU: "2"}),
        gpu_pod("running", "1", node="dp"),
        gpu_pod("fits", "1"),
        gpu_pod("does-not", "1"),
    ]
    code, out = run(tmp_path, docs, "-o", "json")
    got = json.loads(out)
    assert code == 1
    assert got[0]["allocated"] and got[0]["node"] == "dp"
    assert got[0]["allocation"]["devices"]["results"] == []
    assert got[0]["extendedResources"]["devicePlugin"] == {GPU: 1}
    # the running pod holds one of the two, the first pending pod the other
    assert not got[1]["allocated"]
    assert "0 of 2 free" in json.dumps(got[1]["explanation"])
    _, table = run(tmp_path, docs)
    assert f"{GPU}: 1 by the device plugin" in table


def test_plan_refuses_a_fractional_gpu_count_with_the_reason(tmp_path: Path) -> None:
    docs = [slice_("a", [gpu("gpu-0")]), gpu_class(), node("a"), gpu_pod("half", "500m")]
    code, out = run(tmp_path, docs, "-o", "json")
    got = json.loads(out)
    assert code == 1 and not got[0]["allocated"]
    assert "not a whole number" in json.dumps(got[0]["explanation"])


def test_a_resource_no_class_names_is_not_planned(tmp_path: Path) -> None:
    docs = [slice_("a", [gpu("gpu-0")]), device_class(), node("a"), gpu_pod("p", "1")]
    code, out = run(tmp_path, docs, "-o", "json")
    assert code == 0 and json.loads(out) == []


def test_a_pod_waiting_for_its_claim_is_not_planned_for_its_gpus_either(tmp_path: Path) -> None:
    waiting = gpu_pod("waits", "1")
    waiting["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "absent"}]
    docs = [slice_("a", [gpu("gpu-0")]), gpu_class(), node("a"), waiting, gpu_pod("next", "1")]
    code, out = run(tmp_path, docs, "-o", "json")
    got = json.loads(out)
    assert code == 1
    assert [(o["claim"], o["allocated"]) for o in got] == [
        ("default/waits-extended-resources", False),
        ("default/next-extended-resources", True),
    ]
    assert "claim default/absent not found" in json.dumps(got[0]["explanation"])
