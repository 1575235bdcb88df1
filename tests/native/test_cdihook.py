"""kubeacc-cdi-hook against a container bundle laid out as runc has it when it runs
createContainer hooks: the state on stdin, the bundle's config.json naming the root file
system, the driver's libraries mounted there, the image's own (static) ldconfig."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubeacc.native import build

LIB = "/usr/lib/x86_64-linux-gnu"
VERSION = "550.54.15"
LDCONFIG = Path("/sbin/ldconfig")


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build.build_hook(tmp_path_factory.mktemp("hook"))


def bundle(tmp_path: Path, with_ldconfig: bool = True) -> tuple[Path, Path]:
    """(bundle, its root file system) with the stand-in libcuda/NVML mounted (copied) in."""
    cuda, nvml = build.build_stub(tmp_path / "stubs")
    rootfs = tmp_path / "bundle" / "rootfs"
    (rootfs / LIB.lstrip("/")).mkdir(parents=True)
    shutil.copy(cuda, rootfs / LIB.lstrip("/") / f"libcuda.so.{VERSION}")
    shutil.copy(nvml, rootfs / LIB.lstrip("/") / f"libnvidia-ml.so.{VERSION}")
    if with_ldconfig:
        (rootfs / "sbin").mkdir()
        shutil.copy(LDCONFIG, rootfs / "sbin" / "ldconfig")
    config = {"ociVersion": "1.2.0", "process": {"env": ["HOME=/root"]}, "root": {"path": "rootfs"}}
    (tmp_path / "bundle" / "config.json").write_text(json.dumps(config))
    return tmp_path / "bundle", rootfs


def run(hook: Path, state: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(hook), "update-ldcache", *args],
        input=json.dumps(state),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not LDCONFIG.exists(), reason="chroot needs root and a static ldconfig"
)


@needs_root
def test_the_containers_ld_cache_lists_the_driver(hook: Path, tmp_path: Path) -> None:
    b, rootfs = bundle(tmp_path)
    state = {"ociVersion": "1.2.0", "id": "c1", "status": "creating", "pid": 1, "bundle": str(b)}
    link = f"libcuda.so.{VERSION}::{LIB}/libcuda.so"
    got = run(hook, state, "--folder", LIB, "--link", link)
    assert got.returncode == 0, got.stderr
    assert (rootfs / "etc/ld.so.conf.d/00-kubeacc-driver.conf").read_text() == f"{LIB}\n"
    assert os.readlink(rootfs / LIB.lstrip("/") / "libcuda.so") == f"libcuda.so.{VERSION}"
    # ldconfig made the SONAME links and the cache
    assert os.readlink(rootfs / LIB.lstrip("/") / "libcuda.so.1") == f"libcuda.so.{VERSION}"
    listing = subprocess.run(
        [str(LDCONFIG), "-p", "-C", str(rootfs / "etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1" in listing
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {LIB}/libnvidia-ml.so.1" in listing


@needs_root
def test_an_image_without_ldconfig_is_left_alone(hook: Path, tmp_path: Path) -> None:
    b, rootfs = bundle(tmp_path, with_ldconfig=False)
    got = run(hook, {"bundle": str(b)}, "--folder", LIB)
    assert got.returncode == 0, got.stderr
    assert "the image has no ldconfig" in got.stderr
    assert not (rootfs / "etc/ld.so.cache").exists()


def test_a_state_without_a_bundle_fails_with_a_message(hook: Path, tmp_path: Path) -> None:
    got = run(hook, {"id": "c1"}, "--folder", LIB)
    assert got.returncode == 1
    assert 'no "bundle" in the container state' in got.stderr
    got = run(hook, {"bundle": str(tmp_path / "gone")}, "--folder", LIB)
    assert got.returncode == 1 and "cannot open" in got.stderr and "config.json" in got.stderr
    bad = subprocess.run([str(hook), "other"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "usage" in bad.stderr
