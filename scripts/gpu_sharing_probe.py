"""Read-only probe of the NVML calls and driver tools the agent's GPU sharing uses, on a real
GPU: ``python scripts/gpu_sharing_probe.py`` prints JSON (docs/sharing.md records a run).

Reads only: UUID and compute mode through NVML (by PCI bus id, as the agent looks GPUs up),
whether ``nvidia-smi compute-policy`` and ``nvidia-cuda-mps-control`` exist. It changes
nothing on the GPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pynvml

MODES = {0: "DEFAULT", 1: "EXCLUSIVE_THREAD", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def main() -> int:
    pynvml.nvmlInit()
    out: dict[str, Any] = {"driver": _text(pynvml.nvmlSystemGetDriverVersion()), "gpus": []}
    for n in range(pynvml.nvmlDeviceGetCount()):
        bus = _text(pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(n)).busId)
        gpu: dict[str, Any] = {"index": n, "busId": bus}
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
            gpu["uuid"] = _text(pynvml.nvmlDeviceGetUUID(handle))
            gpu["name"] = _text(pynvml.nvmlDeviceGetName(handle))
            mode = pynvml.nvmlDeviceGetComputeMode(handle)
            gpu["computeMode"] = f"{mode} ({MODES.get(mode, '?')})"
        except pynvml.NVMLError as exc:
            gpu["error"] = str(exc)
        out["gpus"].append(gpu)
    for tool, args in (
        ("nvidia-smi", ["compute-policy", "--help"]),
        ("nvidia-cuda-mps-control", None),
    ):
        path = shutil.which(tool)
        entry: dict[str, Any] = {"path": path}
        if path and args:
            done = subprocess.run(
                [path, *args], capture_output=True, text=True, timeout=30, check=False
            )
            lines = (done.stdout + done.stderr).splitlines()
            entry["exit"] = done.returncode
            entry["timeslice"] = [x.strip() for x in lines if "timeslice" in x.lower()]
        out[tool] = entry
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
