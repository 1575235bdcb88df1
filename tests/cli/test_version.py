"""``kubeacc version`` prints the package version, the one pyproject.toml declares."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import kubeacc


def test_version_is_the_package_version() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kubeacc"), "version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert done.stdout == f"{kubeacc.__version__}\n"
    assert kubeacc.__version__ == project["project"]["version"]
