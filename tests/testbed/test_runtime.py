"""The real runtime's build inputs and configuration (no containerd started here)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from kubeacc.testbed import runtime
from kubeacc.testbed.images import PAUSE_IMAGE
from kubeacc.testbed.runtime import Containerd


def test_versions_come_from_the_pinned_module() -> None:
    assert runtime.containerd_version().startswith("v2.")
    assert runtime.cni_plugins_version().startswith("v1.")
    text = (runtime.module_dir() / "go.mod").read_text()
    for package in runtime.PACKAGES.values():
        assert f"\t{package}\n" in text  # a Go tool of the module


def test_cache_key_follows_the_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEACC_RUNTIME_BIN", raising=False)
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    for name in ("go.mod", "go.sum"):
        (src / name).write_text((runtime.module_dir() / name).read_text())
    first = runtime.bin_dir(src)
    assert first.parent.parent == tmp_path / "cache"
    assert first.parent.name.startswith(f"containerd-{runtime.containerd_version()}-")
    (src / "go.sum").write_text((src / "go.sum").read_text() + "\n")
    assert runtime.bin_dir(src) != first


def test_config_reads_the_cdi_dirs_and_runs_runc_and_cni(tmp_path: Path) -> None:
    ctd = Containerd(tmp_path / "node", tmp_path / "bin", [tmp_path / "cdi"], tmp_path / "logs")
    cfg = tomllib.loads(ctd.config())
    assert cfg["version"] == 3
    assert cfg["grpc"]["address"] == str(ctd.socket)
    cri = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["cdi_spec_dirs"] == [str(tmp_path / "cdi")]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert Path(runc["options"]["BinaryName"]).name == "runc"
    assert cri["cni"]["bin_dirs"] == [str(tmp_path / "bin")]
    images = cfg["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == PAUSE_IMAGE
    net = json.loads(ctd.network_config())
    (bridge,) = net["plugins"]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False
    assert bridge["ipam"]["type"] == "host-local"
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path / "node"))
    assert ctd.netns.startswith("kubeacc-")
