"""What the runtime wheel carries: the package that runs on a cluster, without the test kit
(the testbed and the differential harness run from the source tree; pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import kubeacc
from kubeacc.testbed.kubeacc_image import TEST_KIT

REPO = Path(kubeacc.__file__).resolve().parent.parent


def test_the_wheel_is_the_runtime_without_the_test_kit(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    build = subprocess.run(
        [*pip, "-w", str(tmp_path / "dist"), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr
    assert "would be ignored" not in build.stderr  # no package left out by accident
    (wheel,) = (tmp_path / "dist").glob("kubeacc-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {n.split("/")[1] for n in names if n.startswith("kubeacc/") and n.count("/") > 1}
    assert not packages & set(TEST_KIT)
    for wanted in ("agent", "deviceplugin", "lifecycle", "controller", "extender", "contracts"):
        assert wanted in packages
    # the runtime's data files and the native sources the image builds from
    for data in (
        "kubeacc/py.typed",
        "kubeacc/crds/schemas.json",
        "kubeacc/agent/dra/deviceclasses.yaml",
        "kubeacc/native/sharelimit.c",
        "kubeacc/native/cdihook.c",
        "kubeacc/synthetic/profiles.py",
    ):
        assert data in names
    # every module of the source tree but the test kit's is in it
    source = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "kubeacc").rglob("*.py")
        if p.relative_to(REPO / "kubeacc").parts[0] not in TEST_KIT
    }
    assert source <= names
