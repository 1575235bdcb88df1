"""kubeacc plan --add-node PROFILE[:NAME]: would a node of that shape let the claims fit."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.cli.clirun import assert_one_line_error, kubeacc
from tests.engine.helpers import claim, device_class, exactly, node_gpus, slice_

H100 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")'


def _folder(tmp_path: Path, *, with_node: bool = False) -> Path:
    docs = [
        slice_("a", node_gpus(2, model="NVIDIA A100 80GB PCIe")),
        device_class(),
        claim(exactly(count=2, selectors=[H100]), name="two-h100"),
    ]
    if with_node:
        docs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}})
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "all.yaml").write_text(yaml.safe_dump_all(docs))
    return folder


def test_a_node_of_the_right_shape_makes_the_claim_fit(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    alone = kubeacc("plan", str(folder), "-o", "json", home=tmp_path)
    assert alone.returncode == 1
    assert json.loads(alone.stdout)[0]["allocated"] is False

    l4 = kubeacc("plan", str(folder), "--add-node", "l4-pair", "-o", "json", home=tmp_path)
    assert l4.returncode == 1, "two L4s are no H100s"
    assert "what-if-l4-pair" in json.dumps(json.loads(l4.stdout)[0]["explanation"])

    h100 = kubeacc("plan", str(folder), "--add-node", "h100-l4", "-o", "json", home=tmp_path)
    assert h100.returncode == 0, h100.stdout + h100.stderr
    (placement,) = json.loads(h100.stdout)
    assert placement["node"] == "what-if-h100-l4"
    got = sorted(r["device"] for r in placement["allocation"]["devices"]["results"])
    assert got == ["gpu-0000-01-00-0", "gpu-0000-02-00-0"]
    assert "what-if: what-if-h100-l4: a node like profile h100-l4" in h100.stderr


def test_mig_gpus_are_left_out_and_said(tmp_path: Path) -> None:
    folder = _folder(tmp_path, with_node=True)
    res = kubeacc("plan", str(folder), "--add-node", "dgx-h100:big", "-o", "json", home=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)[0]["node"] == "big"
    assert "big: 1 GPU(s) in MIG mode left out (gpu-0000-bf-00-0)" in res.stderr


def test_bad_specs_are_usage_errors(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    res = kubeacc("plan", str(folder), "--add-node", "nope", home=tmp_path)
    assert_one_line_error(res, 2, "unknown profile 'nope'", "dgx-h100", "l4-pair")
    res = kubeacc("plan", str(folder), "--add-node", "l4-pair:a", home=tmp_path)
    assert_one_line_error(res, 2, "--add-node l4-pair:a: node 'a' exists already")


def test_two_nodes_of_one_profile_get_their_own_names(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    docs = [
        device_class(),
        claim(exactly(count=2, selectors=[H100]), name="first"),
        claim(exactly(count=2, selectors=[H100]), name="second"),
    ]
    (folder / "all.yaml").write_text(yaml.safe_dump_all(docs))
    args = ("plan", str(folder), "-o", "json")
    one = kubeacc(*args, "--add-node", "h100-l4", home=tmp_path)
    assert [p["allocated"] for p in json.loads(one.stdout)] == [True, False]
    two = kubeacc(*args, "--add-node", "h100-l4", "--add-node", "h100-l4", home=tmp_path)
    assert two.returncode == 0, two.stdout + two.stderr
    nodes = sorted(p["node"] for p in json.loads(two.stdout))
    assert nodes == ["what-if-h100-l4", "what-if-h100-l4-2"]
