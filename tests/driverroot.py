"""A stand-in NVIDIA driver root for tests: real ELF libraries (the stand-in ``libcuda`` and
NVML of kubeacc/native) under the version-suffixed names of a real driver, with its links, a
utility and the GSP firmware directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kubeacc.native import build

#: The driver version of the synthetic hosts (kubeacc/synthetic: /proc/driver/nvidia/version).
LIB_DIR = "usr/lib/x86_64-linux-gnu"
#: The stand-in libraries, built once (kept while their sources are the same).
STUBS = Path(tempfile.gettempdir()) / f"kubeacc-stubs-{os.getuid()}"


def driver_version(host: Path) -> str:
    """The version the synthetic host's kernel module reports."""
    return (host / "sys/module/nvidia/version").read_text().strip()


def stand_in_driver(root: Path, version: str, lib_dir: str = LIB_DIR) -> Path:
    """Fill ``root`` as a driver root of ``version``. Returns ``root``."""
    cuda, nvml = build.build_stub(STUBS)
    libs = root / lib_dir
    libs.mkdir(parents=True, exist_ok=True)
    for src, name in (
        (cuda, "libcuda"),
        (nvml, "libnvidia-ml"),
        (nvml, "libnvidia-ptxjitcompiler"),
    ):
        shutil.copy(src, libs / f"{name}.so.{version}")
    for link, target in (
        ("libcuda.so.1", f"libcuda.so.{version}"),
        ("libcuda.so", "libcuda.so.1"),
        ("libnvidia-ml.so.1", f"libnvidia-ml.so.{version}"),
    ):
        (libs / link).unlink(missing_ok=True)
        os.symlink(target, libs / link)
    (libs / "libnvidia-ml.so.1.0-other").write_text("not of this driver\n")
    tools = root / "usr/bin"
    tools.mkdir(parents=True, exist_ok=True)
    smi = tools / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho stand-in nvidia-smi\n")
    smi.chmod(0o755)
    fw = root / f"lib/firmware/nvidia/{version}"
    fw.mkdir(parents=True, exist_ok=True)
    (fw / "gsp_ga10x.bin").write_bytes(b"\0" * 64)
    root.chmod(0o755)
    return root
