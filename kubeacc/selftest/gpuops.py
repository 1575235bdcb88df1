"""The self test's checks that change a GPU, each only when the admin asks for it: a MIG
instance created and destroyed, an MPS control daemon started and stopped, the time slice set
and restored. They run kube-acc's own code for these (the DRA driver's MIG prepare, MPS
daemons and GPU control), so a pass says the agent can do the same on this node.

Each refuses, with the reason, what it would disturb: a MIG GPU with an instance in use (a
workload, or a partition another tool made), a GPU whose MPS daemon already runs.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pynvml

from kubeacc.agent.dra.mig.model import GpuMig, MigError, Partition
from kubeacc.agent.dra.mig.nvml import gpu_handles, mig_uuids, nvml_bus, read_gpu
from kubeacc.agent.dra.mig.prepare import MigPartitions
from kubeacc.agent.dra.sharing.mps import MpsDaemons, MpsError, alive
from kubeacc.agent.dra.sharing.timeslice import ControlError, GpuControl
from kubeacc.host import Host, NvmlUnavailable
from kubeacc.model import Device
from kubeacc.selftest.report import Check, failed, passed, skipped

MIG = "MIG create/destroy"
MPS = "MPS daemon start/stop"
TIMESLICE = "time slice set/restore"
CLAIM = "kubeacc-selftest"


def mig_check(host: Host, gpus: list[Device], asked: bool) -> Check:
    if not asked:
        return skipped(MIG, "not asked for (--mig: creates and destroys a MIG instance)")
    if not gpus:
        return skipped(MIG, "no NVIDIA GPU on this node")
    try:
        nvml = host.nvml()
    except NvmlUnavailable as exc:
        return failed(MIG, f"NVML: {exc.message}")
    handles = gpu_handles(nvml)
    migs: list[GpuMig] = []
    for dev in gpus:
        h = handles.get(nvml_bus(dev.pci.bus_id)) if dev.pci else None
        mig = read_gpu(nvml, h, dev.pci.bus_id) if h is not None and dev.pci else None
        if mig is not None and mig.profiles:
            migs.append(mig)
    if not migs:
        return skipped(MIG, "no GPU in MIG mode")
    free = [m for m in migs if not m.instances]
    if not free:
        busy = "; ".join(
            f"GPU {m.bus_id}: GPU instances {[i.gi for i in m.instances]}" for m in migs
        )
        return failed(MIG, f"refused: every MIG GPU has instances in use ({busy})")
    gpu = free[0]
    profile = min(gpu.profiles, key=lambda p: (p.slices, p.memory_mib))
    if not profile.placements:
        return failed(MIG, f"GPU {gpu.bus_id}: profile {profile.name} has no placement")
    start, size = profile.placements[0]
    part = Partition(
        gpu.bus_id, gpu.uuid, gpu.minor, profile.name, profile.id, profile.slices, start, size
    )
    with tempfile.TemporaryDirectory(prefix="kubeacc-selftest-") as state:
        parts = MigPartitions(lambda: nvml, Path(state), host)
        try:
            nodes, uuid = parts.create(CLAIM, gpu.bus_id, part)
        except MigError as exc:
            _undo(parts)
            return failed(MIG, f"GPU {gpu.bus_id}: {exc}")
        try:
            parts.release([CLAIM])
        except MigError as exc:
            return failed(MIG, f"GPU {gpu.bus_id}: created {uuid}, then {exc}")
    after = read_gpu(nvml, handles[nvml_bus(gpu.bus_id)], gpu.bus_id)
    left = mig_uuids(nvml, handles[nvml_bus(gpu.bus_id)])
    if after is None or after.instances or left:
        return failed(
            MIG, f"GPU {gpu.bus_id}: {profile.name} {uuid} destroyed, yet instances remain"
        )
    return passed(
        MIG,
        f"GPU {gpu.bus_id}: {profile.name} at slice {start} created ({uuid}, nodes "
        f"{', '.join(nodes)}) and destroyed",
    )


def _undo(parts: MigPartitions) -> None:
    with contextlib.suppress(MigError, pynvml.NVMLError):
        parts.release([CLAIM])


def _plain_gpu(host: Host, gpus: list[Device]) -> Device | None:
    """The first GPU not in MIG mode (MPS and the time slice are per whole GPU)."""
    try:
        nvml = host.nvml()
    except NvmlUnavailable:
        return gpus[0] if gpus else None
    handles = gpu_handles(nvml)
    for dev in gpus:
        h = handles.get(nvml_bus(dev.pci.bus_id)) if dev.pci else None
        if h is not None and dev.pci and read_gpu(nvml, h, dev.pci.bus_id) is None:
            return dev
    return None


def _asked_plain_gpu(
    host: Host, gpus: list[Device], asked: bool, name: str, option: str
) -> Check | tuple[str, str]:
    """The bus id and UUID of the GPU a changing check works on, or why the check is skipped."""
    if not asked:
        return skipped(name, f"not asked for ({option})")
    gpu = _plain_gpu(host, gpus)
    if gpu is None or gpu.pci is None:
        return skipped(name, "no NVIDIA GPU outside MIG mode")
    return gpu.pci.bus_id, gpu.uuid or ""


def mps_check(host: Host, gpus: list[Device], asked: bool) -> Check:
    target = _asked_plain_gpu(host, gpus, asked, MPS, "--mps: starts an MPS daemon on one GPU")
    if isinstance(target, Check):
        return target
    bus, uuid = target
    with tempfile.TemporaryDirectory(prefix="kubeacc-selftest-mps-") as base:
        daemons = MpsDaemons(host, Path(base))
        try:
            pid = daemons.start(bus, uuid)
        except MpsError as exc:
            return failed(MPS, str(exc))
        try:
            daemons.stop(bus, uuid)
        except MpsError as exc:
            return failed(MPS, f"started (pid {pid}), then {exc}")
        if daemons.pid(bus) is not None and alive(pid):
            return failed(MPS, f"GPU {bus}: the daemon (pid {pid}) still runs after quit")
    return passed(MPS, f"GPU {bus}: daemon pid {pid} started and stopped")


def timeslice_check(host: Host, gpus: list[Device], asked: bool) -> Check:
    target = _asked_plain_gpu(
        host, gpus, asked, TIMESLICE, "--timeslice: changes one GPU's time slice"
    )
    if isinstance(target, Check):
        return target
    bus, uuid = target
    ctl = GpuControl(host)
    before = ctl.timeslice(bus, uuid)
    if before is None:
        return skipped(TIMESLICE, f"GPU {bus}: nvidia-smi reports no time slice")
    other = (before + 1) % 4
    try:
        ctl.set_timeslice(bus, uuid, other)
        changed = ctl.timeslice(bus, uuid)
    except ControlError as exc:
        if exc.not_supported:
            return skipped(TIMESLICE, str(exc))
        return failed(TIMESLICE, str(exc))
    try:
        ctl.set_timeslice(bus, uuid, before)
    except ControlError as exc:
        return failed(TIMESLICE, f"GPU {bus}: left at {other}, restoring {before}: {exc}")
    restored = ctl.timeslice(bus, uuid)
    if changed != other or restored != before:
        return failed(
            TIMESLICE,
            f"GPU {bus}: set {other}, read {changed}; restored {before}, read {restored}",
        )
    return passed(TIMESLICE, f"GPU {bus}: {before} -> {other} -> {before}")
