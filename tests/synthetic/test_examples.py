"""The example host trees shipped in examples/hosts are what the generator writes today."""

from __future__ import annotations

import filecmp
import os
import tarfile
from pathlib import Path

import pytest

from kubeacc.synthetic import profiles
from tests.hosts import discover

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hosts"


def _listing(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            out[rel] = (
                "link:" + os.readlink(path)
                if path.is_symlink()
                else ("dir" if path.is_dir() else "file")
            )
    return out


@pytest.mark.parametrize("name", ["edge-mixed", "intel-fpga-dfl"])
def test_shipped_example_matches_the_generator(name: str, tmp_path: Path) -> None:
    fresh = profiles.build(name, tmp_path / "fresh" / name)
    with tarfile.open(EXAMPLES / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path / "shipped", filter="tar")
    shipped = tmp_path / "shipped" / name
    assert _listing(shipped) == _listing(fresh), "regenerate examples/hosts (see its README)"
    for rel, kind in _listing(fresh).items():
        if kind == "file":
            assert filecmp.cmp(shipped / rel, fresh / rel, shallow=False), rel
    assert discover(shipped).devices, "the example has accelerators to show"
