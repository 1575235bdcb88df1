"""The synthetic NVML's compute mode and the synthetic driver tools, called as the agent
calls them (the agent's own tests are tests/agent/dra/sharing/test_applied.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from kubeacc.synthetic import profiles
from kubeacc.synthetic.nvml_control import ControlledNVML
from kubeacc.synthetic.tools import PYTHON_ENV
from kubeacc.synthetic.tools.hoststate import read_calls


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return profiles.build("l4-pair", tmp_path / "host")


def nvml(root: Path) -> ControlledNVML:
    return ControlledNVML.from_file(str(root / ".synthetic/nvml.json"))


def test_compute_mode_outlives_the_library_instance(root: Path) -> None:
    lib = nvml(root)
    handle = lib.nvmlDeviceGetHandleByPciBusId("00000000:01:00.0")
    assert lib.nvmlDeviceGetComputeMode(handle) == pynvml.NVML_COMPUTEMODE_DEFAULT
    lib.nvmlDeviceSetComputeMode(handle, pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
    again = nvml(root)  # an agent restart: the driver still has the mode
    same = again.nvmlDeviceGetHandleByPciBusId("0000:01:00.0")
    assert again.nvmlDeviceGetComputeMode(same) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    other = again.nvmlDeviceGetHandleByPciBusId("0000:02:00.0")
    assert again.nvmlDeviceGetComputeMode(other) == pynvml.NVML_COMPUTEMODE_DEFAULT
    (call,) = read_calls(root)
    assert (call["call"], call["args"], call["result"]) == ("nvmlDeviceSetComputeMode", [3], "ok")
    with pytest.raises(pynvml.NVMLError_NotFound):
        again.nvmlDeviceGetHandleByPciBusId("0000:99:00.0")


def test_modes_a_gpu_lacks_and_injected_errors(root: Path) -> None:
    path = root / ".synthetic/nvml.json"
    doc = json.loads(path.read_text())
    doc["gpus"][0]["computeModes"] = [0]
    doc["gpus"][1]["errors"] = {"nvmlDeviceGetComputeMode": "NO_PERMISSION"}
    path.write_text(json.dumps(doc))
    lib = nvml(root)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceSetComputeMode(lib.nvmlDeviceGetHandleByIndex(0), 3)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        lib.nvmlDeviceGetComputeMode(lib.nvmlDeviceGetHandleByIndex(1))
    assert [c["result"] for c in read_calls(root)] == ["NOT_SUPPORTED"]


def run(root: Path, tool: str, *args: str, stdin: str = "", **env: str) -> tuple[int, str]:
    done = subprocess.run(
        [str(root / "usr/bin" / tool), *args],
        input=stdin,
        env={**os.environ, PYTHON_ENV: sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def test_nvidia_smi_sets_the_time_slice(root: Path) -> None:
    assert run(root, "nvidia-smi", "compute-policy", "-i", "1", "--set-timeslice=2")[0] == 0
    assert run(root, "nvidia-smi", "compute-policy", "--set-timeslice=9", "-i", "1")[0] == 2
    assert run(root, "nvidia-smi", "compute-policy", "-i", "7", "--set-timeslice=1")[0] == 6
    (call,) = read_calls(root)
    assert (call["tool"], call["args"]) == ("nvidia-smi", [2])


def test_mps_control_daemon_starts_once_and_quits(root: Path, tmp_path: Path) -> None:
    env = {
        "CUDA_VISIBLE_DEVICES": "GPU-x",
        "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log"),
    }
    assert run(root, "nvidia-cuda-mps-control", stdin="quit\n", **env) == (
        1,
        "Cannot find MPS control daemon process",
    )
    assert run(root, "nvidia-cuda-mps-control", "-d", **env)[0] == 0
    pid = int((tmp_path / "pipe/nvidia-cuda-mps-control.pid").read_text())
    assert run(root, "nvidia-cuda-mps-control", "-d", **env) == (
        1,
        "An instance of this daemon is already running",
    )
    assert run(root, "nvidia-cuda-mps-control", stdin="quit\n", **env)[0] == 0
    assert not (tmp_path / "pipe/nvidia-cuda-mps-control.pid").exists()
    assert [(c["call"], c["gpu"], c["args"][1]) for c in read_calls(root)] == [
        ("start", "GPU-x", pid),
        ("stop", "GPU-x", pid),
    ]
    assert "quit" in (tmp_path / "log/control.log").read_text()


def test_nvidia_smi_lists_the_time_slice_as_the_real_tool(root: Path) -> None:
    """The table layout of ``nvidia-smi compute-policy -l`` on driver 580 (an H100)."""
    assert run(root, "nvidia-smi", "compute-policy", "-i", "1", "--set-timeslice=3")[0] == 0
    status, text = run(root, "nvidia-smi", "compute-policy", "-l")
    assert status == 0
    assert "|   0   Timeslice       Default       |" in text.splitlines()
    assert "|   1   Timeslice       Long          |" in text.splitlines()
