"""The MIG hardware the synthetic NVML describes: GPU-instance profiles per GPU model and the
driver's numbering of MIG capability device minors."""

from __future__ import annotations

from dataclasses import dataclass

import pynvml

#: MIG memory slices of an A100/H100 (placements are counted in them).
MEMORY_SLICES = 8
#: GPU instance ids a GPU can have (1..14); capability minors are laid out for 0..14.
MAX_GPU_INSTANCES = 15
#: Compute instances per GPU instance in the capability minor layout.
MAX_COMPUTE_INSTANCES = 8


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile as ``nvmlDeviceGetGpuInstanceProfileInfo`` reports it."""

    profile: int  # NVML_GPU_INSTANCE_PROFILE_* (the argument)
    id: int  # the profile id the create/placement calls take
    name: str  # "3g.40gb"
    slices: int  # compute slices
    memory_mib: int
    multiprocessors: int
    starts: tuple[int, ...]  # possible placements' first memory slice
    size: int  # memory slices of one placement
    #: At most this many at once (``instanceCount``); 0: one per placement.
    max_instances: int = 0

    @property
    def instances(self) -> int:
        return self.max_instances or len(self.starts)


def _table(
    sms: tuple[int, int, int, int, int, int], mem: tuple[int, int, int, int]
) -> tuple[GiProfile, ...]:
    """The profiles of an 80 GB A100/H100 (same slice geometry, other SM and MiB counts).

    ``sms``: 1g, 1g.20gb, 2g, 3g, 4g, 7g; ``mem``: 1g.10gb, 20gb, 40gb profiles, 7g, in MiB.
    Profile constants, ids and placements are those a real H100 80GB HBM3 reported (driver
    580.159.04): ``1g.20gb`` is ``PROFILE_1_SLICE_REV2``; ``1g.10gb+me`` (``REV1``: one
    instance with all media engines) is offered too.
    """
    p = pynvml
    one, twenty, forty, seven = mem
    return (
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.10gb", 1, one, sms[0],
                  (0, 1, 2, 3, 4, 5, 6), 1),
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.10gb+me", 1, one, sms[0],
                  (0, 1, 2, 3, 4, 5, 6), 1, max_instances=1),
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.20gb", 1, twenty, sms[1],
                  (0, 2, 4, 6), 2),
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.20gb", 2, twenty, sms[2],
                  (0, 2, 4), 2),
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.40gb", 3, forty, sms[3],
                  (0, 4), 4),
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.40gb", 4, forty, sms[4], (0,), 4),
        GiProfile(p.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.80gb", 7, seven, sms[5], (0,), 8),
    )  # fmt: skip


#: H100 SXM5 80GB, as a real one reported it: 132 SMs.
H100_80GB = _table((16, 26, 32, 60, 64, 132), (9984, 20096, 40448, 81152))
#: A100 SXM4 80GB (NVIDIA's MIG profile table; memory sizes in the same rounding): 98 SMs.
A100_80GB = _table((14, 14, 28, 42, 56, 98), (9728, 19968, 40192, 80896))


def profiles_for(name: str, memory_total: int) -> tuple[GiProfile, ...]:
    """The MIG profiles of a GPU by its NVML name and memory; () when it has no MIG."""
    big = memory_total >= 70 << 30
    if "H100" in name and big:
        return H100_80GB
    if "A100" in name and big:
        return A100_80GB
    return ()


def cap_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The ``nvidia-cap`` minor of a GPU instance's (or compute instance's) access file.

    The driver numbers them after ``config`` (1) and ``monitor`` (2): per GPU, per GPU
    instance 0..14 one minor for the instance and one for each of its 8 compute instances.
    """
    base = 3 + gpu_minor * MAX_GPU_INSTANCES * (1 + MAX_COMPUTE_INSTANCES)
    gi_minor = base + gi * (1 + MAX_COMPUTE_INSTANCES)
    return gi_minor if ci is None else gi_minor + 1 + ci


def cap_paths(gpu_minor: int, gi: int, ci: int | None = None) -> tuple[str, str]:
    """(the ``/proc`` access file, the ``/dev/nvidia-caps`` node) of a GPU/compute instance."""
    proc = f"/proc/driver/nvidia/capabilities/gpu{gpu_minor}/mig/gi{gi}"
    if ci is not None:
        proc += f"/ci{ci}"
    return f"{proc}/access", f"/dev/nvidia-caps/nvidia-cap{cap_minor(gpu_minor, gi, ci)}"
