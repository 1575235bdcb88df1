"""What a node's synthetic host and agent state hold beyond the checkpoint: the hardware state the
fault runner's hardware invariants compare with the checkpoint.

Read at the host boundary, as an admin on the node would look: the synthetic host's MIG
instances (``/.synthetic/nvml-mig.json``, less those the host booted with), its GPUs' compute
modes and time slices (``/.synthetic/gpu-state.json``), the FPGA cards' loaded AFU (sysfs
``afu_id``); the agent's MIG records (``<state>/mig.json``), MPS control daemons (pid files under
``<state>/mps``) and device metadata directories (``<state>/dra-device-metadata``); and the
environment each CDI device of the node's specs gives a container (a share's limits).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.metadata import SUB_DIR as METADATA_DIR
from kubeacc.agent.dra.mig.prepare import STATE_FILE as MIG_RECORDS
from kubeacc.model import DeviceType
from kubeacc.synthetic import mig_state
from kubeacc.synthetic.tools import hoststate
from tests.hosts import discover


@dataclass
class Hardware:
    #: MIG instance UUID -> "<GPU uuid>/<profile>@<start>", instances made after boot
    mig_instances: dict[str, str] = field(default_factory=dict)
    #: the agent's MIG records (``mig.json``): claim UID, device, instance UUID
    mig_records: list[dict[str, Any]] = field(default_factory=list)
    #: GPU uuid -> what is not at its default ("computeMode=3", "timeslice=2")
    gpu_settings: dict[str, list[str]] = field(default_factory=dict)
    #: GPU bus ids of running MPS control daemons
    mps_daemons: list[str] = field(default_factory=list)
    #: FPGA device name -> loaded AFU id ("" when the card is empty); read only on FPGA hosts
    fpga_afu: dict[str, str] = field(default_factory=dict)
    #: claim UIDs with a device metadata directory
    metadata_uids: set[str] = field(default_factory=set)
    #: CDI device name -> the environment it gives a container (spec-wide edits included)
    cdi_env: dict[str, dict[str, str]] = field(default_factory=dict)


def read(host: Path, state_dir: Path, cdi_dir: Path, *, fpga: bool) -> Hardware:
    """The node's hardware view (ValueError on a torn read: the caller reads again)."""
    return Hardware(
        mig_instances=_mig_instances(host),
        mig_records=_mig_records(state_dir),
        gpu_settings=_gpu_settings(host),
        mps_daemons=_mps_daemons(state_dir),
        fpga_afu=_fpga_afu(host) if fpga else {},
        metadata_uids=_metadata_uids(state_dir),
        cdi_env=_cdi_env(cdi_dir),
    )


def _mig_instances(host: Path) -> dict[str, str]:
    desc = host / ".synthetic" / "nvml.json"
    if not desc.exists():
        return {}
    gpus = list(json.loads(desc.read_text()).get("gpus", []))
    booted = {str(m["uuid"]) for g in gpus for m in g.get("migDevices", [])}
    state = mig_state.MigState(host / ".synthetic", gpus).read()
    out: dict[str, str] = {}
    for i, gpu in enumerate(gpus):
        for inst in (state.get(str(i)) or {}).get("instances", []):
            for ci in inst.get("cis", []):
                if str(ci["uuid"]) not in booted:
                    out[str(ci["uuid"])] = f"{gpu['uuid']}/{inst['profile']}@{inst['start']}"
    return out


def _mig_records(state_dir: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((state_dir / MIG_RECORDS).read_bytes())
    except FileNotFoundError:
        return []
    return list(data["records"])


def _gpu_settings(host: Path) -> dict[str, list[str]]:
    if not (host / hoststate.STATE).exists():
        return {}
    state = hoststate.read_state(host)
    out: dict[str, list[str]] = {}
    for uuid, entry in (state.get("gpus") or {}).items():
        changed = [f"{k}={v}" for k, v in sorted(entry.items()) if v not in (0, None, "")]
        if changed:
            out[str(uuid)] = changed
    return out


def _mps_daemons(state_dir: Path) -> list[str]:
    out = []
    for pid_file in sorted((state_dir / "mps").glob("*/pipe/nvidia-cuda-mps-control.pid")):
        try:
            os.kill(int(pid_file.read_text().strip()), 0)
        except (OSError, ValueError):
            continue
        out.append(pid_file.parent.parent.name)
    return out


def _fpga_afu(host: Path) -> dict[str, str]:
    out = {}
    for dev in discover(host).by_type(DeviceType.FPGA):
        afu = dev.fpga.afu_id if dev.fpga else None
        out[dev.name] = (afu or "").replace("-", "")
    return out


def _metadata_uids(state_dir: Path) -> set[str]:
    root = state_dir / METADATA_DIR
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()


def _cdi_env(cdi_dir: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for path in sorted(cdi_dir.glob("kubeacc.io-claim_*.json")):
        try:
            spec = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        common = dict(kv.split("=", 1) for kv in (spec.get("containerEdits") or {}).get("env", []))
        for dev in spec.get("devices") or []:
            env = dict(common)
            env.update(kv.split("=", 1) for kv in (dev.get("containerEdits") or {}).get("env", []))
            out[str(dev["name"])] = env
    return out
