"""Tables a person can read: plain columns when piped, fitted to an 80-column terminal, and
``-o json|yaml`` that parse back, from the real ``kubeacc`` script."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.cli.clirun import kubeacc
from tests.engine.helpers import claim, device_class, exactly, node_gpus, slice_
from tests.hosts import HostFactory

BOX = set("─━│┃┏┓┗┛┡┩╇╋┳┻┼╭╮╰╯")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _bdfs(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "proc/driver/nvidia/gpus").iterdir())


def test_discover_piped_is_plain_columns(hosts: HostFactory, tmp_path: Path) -> None:
    root = hosts.pristine("dgx-h100")
    result = kubeacc("discover", "--host-root", str(root), home=tmp_path, COLUMNS="80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert not BOX & set(result.stdout) and "\x1b" not in result.stdout
    assert lines[0].split() == [
        "TYPE", "NAME", "VENDOR", "MODEL", "BDF", "NUMA", "PCIE", "ROOT", "HEALTH", "DETAILS"
    ]  # fmt: skip
    header_bdf = lines[0].index("BDF")
    gpu_rows = [line for line in lines[1:] if line.startswith("gpu ")]
    # One row per device, whole values, every column starting where its header does.
    assert [row[header_bdf:].split()[0] for row in gpu_rows] == _bdfs(root)
    assert all("NVIDIA H100 80GB HBM3" in row for row in gpu_rows)
    assert all(len(row) > 80 for row in gpu_rows)  # piped output is never cut to a width


def test_discover_on_an_80_column_terminal(hosts: HostFactory, tmp_path: Path) -> None:
    root = hosts.pristine("dgx-h100")
    result = kubeacc(
        "discover", "--host-root", str(root), home=tmp_path, COLUMNS="80", TTY_COMPATIBLE="1"
    )
    assert result.returncode == 0, result.stderr
    text = ANSI.sub("", result.stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    for bdf in _bdfs(root):  # every BDF whole, on one row with its model
        assert any(bdf in line and "NVIDIA H100 80GB HBM3" in line for line in text.splitlines())
    assert "left out at this width" in text
    wide = kubeacc(
        "discover", "--host-root", str(root), home=tmp_path, COLUMNS="250", TTY_COMPATIBLE="1"
    )
    assert "left out" not in wide.stdout and "PCIE ROOT" in ANSI.sub("", wide.stdout)


def test_discover_without_accelerators_hints(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = kubeacc("discover", "--host-root", str(tmp_path / "empty"), home=tmp_path)
    assert result.returncode == 0
    assert result.stdout.splitlines()[0].startswith("TYPE")
    assert f"hint: no accelerators found under {tmp_path / 'empty'}" in result.stderr
    result = kubeacc(
        "discover", "--host-root", str(tmp_path / "empty"), "-o", "json", home=tmp_path
    )
    assert json.loads(result.stdout)["devices"] == []
    assert "hint: no accelerators" in result.stderr


@pytest.fixture
def plan_folder(tmp_path: Path) -> Path:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(count=2), name="fits"),
        claim(exactly(count=3), name="too-big"),
    ]
    folder = tmp_path / "objs"
    folder.mkdir()
    (folder / "all.yaml").write_text(yaml.safe_dump_all(docs))
    return folder


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_plan_output_parses_back(plan_folder: Path, tmp_path: Path, fmt: str) -> None:
    result = kubeacc("plan", str(plan_folder), "-o", fmt, home=tmp_path)
    assert result.returncode == 1  # one claim does not fit
    placements = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert [p["claim"] for p in placements] == ["default/fits", "default/too-big"]
    assert placements[0]["allocated"] and not placements[1]["allocated"]


def test_plan_table_piped_and_on_80_columns(plan_folder: Path, tmp_path: Path) -> None:
    piped = kubeacc("plan", str(plan_folder), home=tmp_path)
    lines = piped.stdout.splitlines()
    assert lines[0].split() == ["CLAIM", "NODE", "DEVICES", "WHY", "NOT"]
    assert lines[1].split()[:2] == ["default/fits", "a"]
    assert lines[2].startswith("default/too-big") and "need 3" in lines[2]
    assert not BOX & set(piped.stdout)
    tty = kubeacc("plan", str(plan_folder), home=tmp_path, COLUMNS="80", TTY_COMPATIBLE="1")
    text = ANSI.sub("", tty.stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "default/too-big" in text and "need 3" in text
