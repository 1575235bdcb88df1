"""kubeacc plan over a folder of YAML."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from typer.testing import CliRunner

from kubeacc.cli.plan import plan
from tests.engine.helpers import claim, device_class, exactly, gpu, node_gpus, slice_


def test_plan_folder_json_and_table(tmp_path: Path) -> None:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(count=2), name="fits"),
        claim(exactly(count=3), name="too-big"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert out[0]["allocated"] and out[0]["node"] == "a"
    assert not out[1]["allocated"] and "need 3" in json.dumps(out[1]["explanation"])
    res = CliRunner().invoke(app, [str(tmp_path)])
    assert "default/fits" in res.stdout


def test_plan_says_how_each_share_is_enforced(tmp_path: Path) -> None:
    def shared(name: str, how: str) -> dict[str, object]:
        dev = gpu(name, allowMultipleAllocations=True)
        dev["attributes"]["shareEnforcement"] = {"string": how}
        return dev

    share = {"requests": {"memory": "10Gi"}}
    docs = [
        slice_("a", [shared("g0", "library")]),
        slice_("b", [shared("g1", "advisory")]),
        device_class(),
        claim(exactly(count=1, capacity=share), name="one"),
        # g0 has 70Gi left: this share goes to g1
        claim(exactly(count=1, capacity={"requests": {"memory": "75Gi"}}), name="two"),
        claim(exactly(count=1), name="whole"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    out = json.loads(CliRunner().invoke(app, [str(tmp_path), "-o", "json"]).stdout)
    assert [o.get("shares") for o in out] == [{"gpus": "library"}, {"gpus": "advisory"}, None]
    table = CliRunner().invoke(app, [str(tmp_path)]).stdout
    assert "(share, library)" in table and "(share, advisory)" in table


def _pod(name: str, *claims: str, made: dict[str, str] | None = None) -> dict[str, object]:
    pod: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "app", "image": "app"}],
            "resourceClaims": [
                {"name": f"e{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ]
            + [{"name": entry, "resourceClaimTemplateName": "t"} for entry in made or {}],
        },
    }
    if made:
        pod["status"] = {
            "resourceClaimStatuses": [
                {"name": entry, "resourceClaimName": c} for entry, c in made.items()
            ]
        }
    return pod


def test_plan_places_a_pods_claims_together(tmp_path: Path) -> None:
    h100 = 'device.attributes["kubeacc.io"].model == "h100"'
    base = [
        slice_("a", [gpu("gpu-0", model="h100"), gpu("gpu-1", model="a100")]),
        device_class(),
        claim(exactly(), name="any"),
        claim(exactly(selectors=[h100]), name="h100"),
    ]
    app = typer.Typer()
    app.command()(plan)
    # Without the pod, claim by claim: the first takes the h100, the second cannot fit.
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(base))
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 1
    assert [o["allocated"] for o in json.loads(res.stdout)] == [True, False]
    # With the pod that uses both (one named, one made from a template): placed together.
    (tmp_path / "all.yaml").write_text(
        yaml.safe_dump_all([*base, _pod("trainer", "any", made={"hot": "h100"})])
    )
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 0, res.stdout
    out = json.loads(res.stdout)
    assert [(o["claim"], o["pod"], o["node"]) for o in out] == [
        ("default/any", "default/trainer", "a"),
        ("default/h100", "default/trainer", "a"),
    ]
    assert [[r["device"] for r in o["allocation"]["devices"]["results"]] for o in out] == [
        ["gpu-1"],
        ["gpu-0"],
    ]
    table = CliRunner().invoke(app, [str(tmp_path)]).stdout
    header = next(line for line in table.splitlines() if "CLAIM" in line)
    assert header.split()[:2] == ["POD", "CLAIM"]
    assert table.count("default/trainer") == 2


def test_plan_does_not_place_a_pod_whose_claim_is_missing(tmp_path: Path) -> None:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(), name="here"),
        _pod("p", "here", "gone"),
        claim(exactly(), name="alone"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert [(o["claim"], o["allocated"]) for o in out] == [
        ("default/here", False),
        ("default/alone", True),
    ]
    assert "claim default/gone not found" in json.dumps(out[0]["explanation"])
