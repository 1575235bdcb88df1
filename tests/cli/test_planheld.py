"""kubeacc plan says who holds each device: DRA claims, extender decisions, device plugin pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.testing import CliRunner

from kubeacc.cli.plan import plan
from kubeacc.contracts.names import DECISION_ANNOTATION
from tests.engine.helpers import allocated, claim, device_class, exactly, node_gpus, slice_


def _pod(
    name: str,
    node: str,
    limits: dict[str, str],
    *,
    namespace: str = "default",
    decision: dict[str, Any] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if decision is not None:
        meta["annotations"] = {DECISION_ANNOTATION: json.dumps(decision)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "app", "image": "app", "resources": {"limits": limits}}],
        },
        "status": {"phase": phase},
    }


def _held_claim(name: str, *devices: str, pods: tuple[str, ...] = ()) -> dict[str, Any]:
    c = claim(exactly(count=len(devices)), name=name)
    c["status"] = {
        "allocation": allocated("a", *devices)["status"]["allocation"],
        "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods],
    }
    return c


def _docs(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        slice_("a", node_gpus(3)),
        device_class(),
        _held_claim("train", "gpu-0", "gpu-1", pods=("trainer",)),
        _held_claim("orphan", "gpu-2"),  # allocated, no pod uses it (yet)
        _pod(
            "by-extender",
            "b",
            {"kubeacc.io/gpu": "1"},
            decision={
                "node": "b",
                "containers": [{"name": "app", "devices": ["gpu-5"], "whole": True}],
            },
        ),
        _pod("by-plugin", "c", {"kubeacc.io/fpga": "2"}, namespace="fpga"),
        _pod("done", "c", {"kubeacc.io/fpga": "1"}, namespace="fpga", phase="Succeeded"),
        *extra,
    ]


def _invoke(folder: Path, *args: str) -> Any:
    app = typer.Typer()
    app.command()(plan)
    return CliRunner().invoke(app, [str(folder), *args])


def test_held_names_claim_pods_and_path_of_every_device(tmp_path: Path) -> None:
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(_docs()))
    res = _invoke(tmp_path, "--held", "-o", "json")
    assert res.exit_code == 0, res.stdout
    assert json.loads(res.stdout) == [
        {"node": "a", "device": "gpu-0", "path": "DRA", "claim": "default/train",
         "pods": ["default/trainer"], "use": "whole"},
        {"node": "a", "device": "gpu-1", "path": "DRA", "claim": "default/train",
         "pods": ["default/trainer"], "use": "whole"},
        {"node": "a", "device": "gpu-2", "path": "DRA", "claim": "default/orphan", "pods": [],
         "use": "whole"},
        {"node": "b", "device": "gpu-5", "path": "extender", "claim": None,
         "pods": ["default/by-extender"], "use": "whole"},
        {"node": "c", "device": "(chosen by the kubelet)", "path": "device plugin",
         "claim": None, "pods": ["fpga/by-plugin"], "use": "2 of kubeacc.io/fpga"},
    ]  # fmt: skip
    scoped = _invoke(tmp_path, "--held", "-n", "fpga", "-o", "json")
    assert [h["pods"] for h in json.loads(scoped.stdout)] == [["fpga/by-plugin"]]


def test_nothing_pending_says_so_and_shows_the_holders(tmp_path: Path) -> None:
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(_docs()))
    res = _invoke(tmp_path)
    assert res.exit_code == 0, res.stdout
    assert res.stdout.startswith("No pending ResourceClaims: nothing to plan.")
    held = res.stdout[res.stdout.index("Held devices") :]
    rows = [line.split() for line in held.splitlines()[1:] if line.strip()]
    assert ["a", "gpu-1", "whole", "default/train", "default/trainer", "DRA"] in rows
    assert ["a", "gpu-2", "whole", "default/orphan", "(no", "pod)", "DRA"] in rows
    assert not any("default/done" in r for r in rows)


def test_a_claim_that_does_not_fit_is_shown_beside_the_holders(tmp_path: Path) -> None:
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(_docs(claim(exactly(), name="new"))))
    res = _invoke(tmp_path)
    assert res.exit_code == 1  # every GPU of node a is held
    plan_part, held = res.stdout.split("Held devices")
    assert "default/new" in plan_part and "default/trainer" in held
    # JSON keeps its shape: the pending claims' placements only
    out = json.loads(_invoke(tmp_path, "-o", "json").stdout)
    assert [(o["claim"], o["allocated"]) for o in out] == [("default/new", False)]
