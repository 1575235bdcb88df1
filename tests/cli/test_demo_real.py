"""``kubeacc demo --runtime real``: the same demo on containerd + runc; every workload container
runs and its own output (ACCELERATOR_UNITS, its /dev) is in the demo's table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubeacc.cli.demo_claims import CLAIMS

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = Path(sys.executable).parent / "kubeacc"
    workdir = tmp_path_factory.mktemp("demo-real")
    out = subprocess.run(
        [str(exe), "demo", "--runtime", "real", "--workdir", str(workdir), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "demo finished" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + f"\nexit status {out.returncode}\n"


def test_real_demo_finds_no_problem(demo_output: str) -> None:
    assert "demo problems" not in demo_output, demo_output[-1500:]
    assert demo_output.endswith("\nexit status 0\n")
    assert f"{len(CLAIMS)}/{len(CLAIMS)} pods Running" in demo_output


def test_every_container_prints_the_devices_it_got(demo_output: str) -> None:
    # One line of the container's own output per claim (nothing like it without a real runtime).
    assert demo_output.count("the container printed:") == len(CLAIMS)
    assert demo_output.count("ACCELERATOR_UNITS=0000:") == len(CLAIMS)
    assert demo_output.count("/dev: ") == len(CLAIMS)
    assert "(no container output)" not in demo_output
    # Device nodes of several kinds arrived through containerd's CDI injection.
    for node in (r"nvidia\d+", r"nvidiactl", r"infiniband/uverbs\d+", r"xpu\d+", r"dfl-port\.\d+"):
        assert re.search(rf"\b{node}\b", demo_output), node


def test_the_real_demo_rejects_an_unknown_runtime() -> None:
    exe = Path(sys.executable).parent / "kubeacc"
    out = subprocess.run(
        [str(exe), "demo", "--runtime", "docker"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2
    assert "--runtime must be fake or real" in out.stderr + out.stdout
