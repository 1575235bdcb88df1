"""Mutable state of a synthetic host's GPUs and the record of what was done to them.

Real GPUs keep their compute mode and time slice in the driver, across agent restarts; a
synthetic host keeps them in ``/.synthetic/gpu-state.json`` (per GPU UUID), changed under a
file lock by the synthetic NVML and the synthetic ``nvidia-smi``. Every state-changing call is
appended to ``/.synthetic/calls.jsonl`` (one JSON object a line: ``tool``, ``call``, ``gpu``,
``args``, ``result``), the record the tests read. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE = ".synthetic/gpu-state.json"
LOCK = ".synthetic/gpu-state.lock"
CALLS = ".synthetic/calls.jsonl"
DESCRIPTION = ".synthetic/nvml.json"


def root_of_tool(argv0: str) -> Path:
    """The host root of a tool installed as ``<root>/usr/bin/<name>``."""
    return Path(argv0).resolve().parent.parent.parent


@contextlib.contextmanager
def locked_state(root: Path) -> Iterator[dict[str, Any]]:
    """The state document, written back (atomically) when the block ends without error."""
    with open(root / LOCK, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state: dict[str, Any] = json.loads((root / STATE).read_text())
        except FileNotFoundError:
            state = {}
        yield state
        tmp = root / (STATE + ".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, root / STATE)


def read_state(root: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((root / STATE).read_text())
    except FileNotFoundError:
        return {}
    return state


def gpu_state(state: dict[str, Any], uuid: str) -> dict[str, Any]:
    entry: dict[str, Any] = state.setdefault("gpus", {}).setdefault(uuid, {})
    return entry


def record(root: Path, tool: str, call: str, gpu: str, args: list[Any], result: str) -> None:
    """Append one line to the call record (one ``write`` of a line under O_APPEND)."""
    line = json.dumps(
        {"tool": tool, "call": call, "gpu": gpu, "args": args, "result": result},
        sort_keys=True,
    )
    fd = os.open(root / CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_calls(root: Path) -> list[dict[str, Any]]:
    """The call record, oldest first."""
    try:
        text = (root / CALLS).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def gpus(root: Path) -> list[dict[str, Any]]:
    """The GPUs of the NVML description."""
    doc = json.loads((root / DESCRIPTION).read_text())
    return list(doc.get("gpus", []))
