"""The kube-acc image made from this machine's Python: complete, cached, and it runs kube-acc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

import kubeacc
from kubeacc.testbed.kubeacc_image import (
    KUBEACC_IMAGE,
    build_image,
    cache_key,
    distributions,
    ensure_image,
    image_path,
)
from tests.testbed.test_images import blob, blobs


def test_distributions_are_what_kubeacc_needs_at_run_time() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in distributions()}
    assert {"pydantic", "lightkube", "grpclib", "typer", "cryptography", "pyyaml"} <= names
    # Test tools (the "test" extra) stay out; kube-acc itself comes from the source tree.
    assert not names & {"pytest", "mypy", "hypothesis", "ruff", "grpcio", "kubeacc"}


def test_cache_key_follows_the_package_files(tmp_path: Path) -> None:
    package = Path(kubeacc.__file__).parent
    copy = tmp_path / "kubeacc"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    dists = distributions()
    before = cache_key(dists, copy)
    assert cache_key(dists, copy) == before
    (copy / "cli" / "entry.py").write_text("# changed\n")
    assert cache_key(dists, copy) != before
    assert image_path().name == "kubeacc.tar"


def test_image_runs_kubeacc_as_its_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path / "cache"))
    image = ensure_image()
    assert image.tarball.parent.parent == tmp_path / "cache"
    assert ensure_image() == image  # the second call is a cache hit
    index, files = blobs(image.tarball)
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == KUBEACC_IMAGE
    manifest = json.loads(blob(files, entry["digest"]))
    config = json.loads(blob(files, manifest["config"]["digest"]))["config"]
    assert config["Entrypoint"] == ["kubeacc"] and config["User"] == "65532:65532"
    assert config["Env"][0].startswith("PATH=/opt/kubeacc/bin:")
    (layer,) = manifest["layers"]
    root = tmp_path / "root"
    root.mkdir()
    layer_file = tmp_path / "layer.tar"
    layer_file.write_bytes(blob(files, layer["digest"]))
    with tarfile.open(layer_file) as tar:
        tar.extractall(root, filter="fully_trusted")
    assert (root / "opt/kubeacc/pyvenv.cfg").is_file()
    assert not list(root.glob("opt/kubeacc/lib/python3*/site-packages/pytest"))
    if os.geteuid() != 0:
        pytest.skip("running the image's kubeacc needs chroot (root)")
    done = _kubeacc_in(root, "version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == kubeacc.__version__
    # What a cluster runs, no more: the test kit stays in the source tree (pyproject.toml).
    site = next(root.glob("opt/kubeacc/lib/python3*/site-packages/kubeacc"))
    assert (site / "synthetic").is_dir() and (site / "agent" / "compose.py").is_file()
    assert not (site / "testbed").exists() and not (site / "differential").exists()
    demo = _kubeacc_in(root, "demo")
    assert demo.returncode == 1, demo.stderr
    assert demo.stderr.strip().splitlines() == [
        "error: kubeacc demo needs the testbed, which comes with a source checkout of "
        "kube-acc, not with the installed package: run bash scripts/demo.sh there"
    ]


def _kubeacc_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubeacc ARGS`` run in the unpacked image at ``root``, as its user."""
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    return subprocess.run(
        [chroot, "--userspec=65532:65532", str(root), "kubeacc", *args],
        env={"PATH": "/opt/kubeacc/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_build_refuses_a_target_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        build_image(blocker / "kubeacc.tar")
