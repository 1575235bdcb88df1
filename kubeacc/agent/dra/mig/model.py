"""The MIG data of the DRA driver: what NVML offers on a MIG GPU and what a partition device is.

Shared by the NVML reads (:mod:`kubeacc.agent.dra.mig.nvml`), the slice publisher
(:mod:`kubeacc.agent.dra.mig.publish`), prepare (:mod:`kubeacc.agent.dra.mig.prepare`) and the
plugin's device index (:mod:`kubeacc.agent.dra.devices`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Memory slices of a MIG GPU (placements count in them) and its compute slices.
MEMORY_SLICES = 8
COMPUTE_SLICES = 7
COMPUTE_COUNTER = "compute-slices"
MIB = 1 << 20


class MigError(Exception):
    """A partition could not be created or destroyed; the message says which and why."""


@dataclass(frozen=True)
class Profile:
    profile: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int
    name: str  # "3g.40gb"
    slices: int
    memory_mib: int
    placements: tuple[tuple[int, int], ...]  # (start, size)


@dataclass(frozen=True)
class Instance:
    gi: int
    profile_id: int
    start: int
    size: int


@dataclass(frozen=True)
class GpuMig:
    """One MIG-mode GPU as NVML describes it."""

    bus_id: str  # sysfs form, lower case
    uuid: str
    minor: int
    profiles: tuple[Profile, ...]
    instances: tuple[Instance, ...]


@dataclass(frozen=True)
class Partition:
    """What prepare needs to create (or hand out) one partition device."""

    gpu_bus_id: str
    gpu_uuid: str
    gpu_minor: int
    profile: str
    profile_id: int
    slices: int
    start: int
    size: int
    #: A fixed instance's GPU instance id (prepared as is); None: created on prepare.
    fixed_gi: int | None = None
    fixed_uuid: str = ""
    memory_mib: int = 0


def counter_set(gpu: str) -> str:
    return f"{gpu}-mig"


def partition_name(gpu: str, profile: str, start: int) -> str:
    return f"{gpu}-mig-{profile.replace('.', '-')}-{start}"
