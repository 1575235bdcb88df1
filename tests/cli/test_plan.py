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
