"""The MIG state of a synthetic host: ``/.synthetic/nvml-mig.json`` (MIG mode and instances per
GPU, shared by every process that opens the host) and the call log ``/.synthetic/nvml-calls.log``;
a GPU reset makes a pending MIG mode the current one (what the synthetic kernel does on a write
to a GPU's ``reset``)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubeacc.synthetic.mig_hw import profiles_for

STATE_FILE = "nvml-mig.json"
CALL_LOG = "nvml-calls.log"


class MigState:
    """The MIG state file of one synthetic host, read and written under an flock."""

    def __init__(self, synthetic_dir: Path, gpus: list[dict[str, Any]]):
        self.dir = synthetic_dir
        self.root = synthetic_dir.parent
        self.path = synthetic_dir / STATE_FILE
        self.log_path = synthetic_dir / CALL_LOG
        self.gpus = gpus

    def _initial(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, gpu in enumerate(self.gpus):
            mode = int(gpu.get("migMode", 0))
            table = {p.name: p for p in profiles_for(str(gpu["name"]), int(gpu["memoryTotal"]))}
            instances = []
            for mig in gpu.get("migDevices", []):
                prof = table.get(str(mig["profile"]))
                start, size = mig.get("placement", [0, prof.size if prof else 1])
                instances.append(
                    {
                        "gi": int(mig.get("gpuInstanceId", 0)),
                        "profileId": prof.id if prof else -1,
                        "profile": str(mig["profile"]),
                        "start": int(start),
                        "size": int(size),
                        "memoryTotal": int(mig["memoryTotal"]),
                        "cis": [{"ci": int(mig.get("computeInstanceId", 0)), "uuid": mig["uuid"]}],
                    }
                )
            out[str(i)] = {"mode": mode, "pending": mode, "instances": instances, "made": 0}
        out["boot"] = self._boot()
        return out

    def _boot(self) -> str:
        """Which description the state grew from: another one (edited) starts afresh."""
        text = json.dumps(self.gpus, sort_keys=True).encode()
        return hashlib.sha256(text).hexdigest()[:16]

    @contextmanager
    def locked(self) -> Iterator[dict[str, Any]]:
        """The state, exclusively; written back when the block ends without an exception."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".nvml-mig.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = json.loads(self.path.read_text()) if self.path.exists() else None
            except ValueError:
                state = None
            if not isinstance(state, dict) or state.get("boot") != self._boot():
                state = self._initial()
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
                os.replace(tmp, self.path)

    def read(self) -> dict[str, Any]:
        """The state as it is (no lock: writers replace the file whole)."""
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            state = None
        if not isinstance(state, dict) or state.get("boot") != self._boot():
            return self._initial()
        return state

    def record(self, call: str, gpu: int, **fields: Any) -> None:
        entry = {"call": call, "gpu": str(self.gpus[gpu]["uuid"]), **fields}
        with open(self.log_path, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def host_file(self, path: str, text: str | None) -> None:
        """Create (``text``) or remove (None) a file of the host tree."""
        target = self.root / path.lstrip("/")
        if text is None:
            target.unlink(missing_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def read_calls(synthetic_dir: Path) -> list[dict[str, Any]]:
    """The call log of a synthetic host (``/.synthetic``), oldest first."""
    path = synthetic_dir / CALL_LOG
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reset_gpu(synthetic_dir: Path, gpus: list[dict[str, Any]], index: int) -> None:
    """A GPU reset: a pending MIG mode becomes the current one (instances go with MIG off)."""
    state = MigState(synthetic_dir, gpus)
    with state.locked() as s:
        entry = s[str(index)]
        if entry["pending"] != entry["mode"]:
            entry["mode"] = entry["pending"]
            if not entry["mode"]:
                entry["instances"] = []
    state.record("reset", index, migMode=s[str(index)]["mode"])


def reboot(root: Path) -> None:
    """A node reboot of the synthetic host: every GPU's pending MIG mode becomes its mode, and
    every MIG instance is gone with its capability files (``/proc`` is made anew at boot)."""
    desc = root / ".synthetic" / "nvml.json"
    if not desc.exists():
        return
    gpus = list(json.loads(desc.read_text()).get("gpus", []))
    state = MigState(root / ".synthetic", gpus)
    with state.locked() as s:
        for i in range(len(gpus)):
            entry = s[str(i)]
            entry["mode"] = entry["pending"]
            entry["instances"] = []
    caps = root / "proc/driver/nvidia/capabilities"
    for gi_dir in caps.glob("gpu*/mig/gi*"):
        shutil.rmtree(gi_dir)
    for i in range(len(gpus)):
        state.record("reboot", i)


def reset_gpu_at(root: Path, bus_id: str) -> bool:
    """Reset the synthetic host's GPU at ``bus_id`` (sysfs form); False if none is there."""
    desc = root / ".synthetic" / "nvml.json"
    if not desc.exists():
        return False
    gpus = list(json.loads(desc.read_text()).get("gpus", []))
    for i, gpu in enumerate(gpus):
        if str(gpu.get("busId", "")).lower()[-12:] == bus_id.lower()[-12:]:
            reset_gpu(root / ".synthetic", gpus, i)
            return True
    return False
