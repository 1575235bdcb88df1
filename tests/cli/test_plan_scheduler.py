"""kubeacc plan for pods Volcano (or another scheduler) places: the devices as kube-scheduler's
allocator would give them, and what the plan does not predict said, never guessed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

from kubeacc.cli.plan import plan
from kubeacc.cli.planpodgroups import volcano_namespaces
from kubeacc.cli.planscheduler import other_schedulers
from tests.engine.helpers import claim, device_class, exactly, node_gpus, slice_


def _pod(name: str, claim_name: str, scheduler: str | None, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "app"}
    if extra.get("cpu"):
        container["resources"] = {"requests": {"cpu": extra["cpu"]}}
    spec: dict[str, Any] = {
        "containers": [container],
        "resourceClaims": [{"name": "gpus", "resourceClaimName": claim_name}],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if extra.get("group"):
        meta["annotations"] = {"scheduling.k8s.io/group-name": extra["group"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _group(name: str, queue: str, members: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"queue": queue, "minMember": members},
    }


def _run(tmp_path: Path, docs: list[dict[str, Any]], *args: str) -> Any:
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    return CliRunner().invoke(app, [str(tmp_path), *args])


def test_plan_says_what_it_cannot_predict_for_a_volcano_gang_pod(tmp_path: Path) -> None:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(count=2), name="w0"),
        claim(exactly(count=2), name="plain"),
        _pod("train-w-0", "w0", "volcano", group="train", cpu="1"),
        _group("train", "research", 4),
        _pod("web", "plain", None),
    ]
    res = _run(tmp_path, docs, "-o", "json")
    out = {o["claim"]: o for o in json.loads(res.stdout)}
    # the devices are still planned (Volcano runs the same DRA filter) ...
    assert out["default/w0"]["allocated"] and out["default/w0"]["node"] == "a"
    # ... and what Volcano alone decides is named, not guessed
    sched = out["default/w0"]["scheduler"]
    assert sched["name"] == "volcano"
    said = "\n".join(sched["notPredicted"])
    assert "whether and when Volcano binds the pod" in said
    assert "queue research" in said
    assert "fair share" in said
    assert "gang default/train: bound together with its 4 members or not at all" in said
    assert "BestEffort" not in said  # it asks CPU
    # a pod kube-scheduler places gets no such note
    assert "scheduler" not in out["default/plain"]
    table = _run(tmp_path, docs).stdout
    assert "Pods another scheduler places; not predicted:" in table
    assert "default/train-w-0 (volcano):" in table


def test_plan_warns_that_a_claim_only_volcano_pod_escapes_its_gang(tmp_path: Path) -> None:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(), name="w0"),
        claim(exactly(), name="x"),
        _pod("train-w-0", "w0", "volcano", group="train"),
        _pod("other", "x", "my-scheduler"),
    ]
    out = {o["claim"]: o for o in json.loads(_run(tmp_path, docs, "-o", "json").stdout)}
    said = "\n".join(out["default/w0"]["scheduler"]["notPredicted"])
    assert "asks no CPU or memory: BestEffort to Volcano" in said
    assert "queue (not in the input)" in said
    assert "its minMember pods" in said  # no PodGroup in the input: its size is unknown
    (line,) = out["default/x"]["scheduler"]["notPredicted"]
    assert out["default/x"]["scheduler"]["name"] == "my-scheduler"
    assert "where my-scheduler binds the pod" in line


def test_an_unread_podgroup_says_why_and_only_volcano_pods_namespaces_are_asked() -> None:
    pods = [
        _pod("train-w-0", "w0", "volcano", group="train", cpu="1"),
        {**_pod("web", "plain", None), "metadata": {"name": "web", "namespace": "web"}},
    ]
    assert volcano_namespaces(pods) == ["default"]
    why = "not allowed to list PodGroups (scheduling.volcano.sh/v1beta1) in namespace default"
    (other,) = other_schedulers(pods, {"default": why}).values()
    said = "\n".join(other.not_predicted)
    assert f"queue (its PodGroup unknown: {why})" in said
    assert f"its minMember pods (its PodGroup unknown: {why})" in said
