"""The allocator harness builds per Kubernetes release, either selectable."""

from __future__ import annotations

import subprocess

import pytest

from kubeacc.differential import build
from kubeacc.testbed.build import BuildError
from kubeacc.testbed.versions import LANES


def test_default_is_the_release_the_engine_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(build.VERSION_ENV, raising=False)
    assert build.harness() == build.HARNESSES[build.DEFAULT]


def test_env_selects_the_main_lane_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.37")
    assert build.harness().release == "v1.37.2" == LANES["1.37"].version
    assert build.harness().build_args() == ["go", "build", "-modfile", "go.mod"]


def test_env_selects_the_compatibility_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.36")
    which = build.harness()
    assert which.release == "v1.36.3" == LANES["1.36"].version
    assert which.build_args() == ["go", "build", "-modfile", "go-1.36.mod", "-tags", "k8s136"]


def test_unknown_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.35")
    with pytest.raises(BuildError, match=r"1\.35"):
        build.harness()
    assert build.main(["1.99"]) == 1


def test_every_harness_has_its_module_files() -> None:
    src = build.source_dir()
    for which in build.HARNESSES.values():
        mod = src / which.modfile
        text = mod.read_text()
        minor = which.release.removeprefix("v1.")
        assert f"k8s.io/dynamic-resource-allocation v0.{minor}" in text, which
        assert mod.with_suffix(".sum").is_file(), which


def test_binaries_differ_per_release_and_name_it() -> None:
    paths = {}
    for name, which in build.HARNESSES.items():
        path = build.ensure_built(which)
        assert which.release in path.parent.name
        out = subprocess.run([str(path), "-version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == which.release, name
        paths[name] = path
    assert len(set(paths.values())) == len(paths)
