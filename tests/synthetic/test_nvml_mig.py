"""The synthetic NVML's dynamic MIG: the pynvml calls, their state file and call log."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pynvml
import pytest

from kubeacc.synthetic import profiles
from kubeacc.synthetic.mig_hw import cap_minor
from kubeacc.synthetic.mig_state import read_calls, reset_gpu
from kubeacc.synthetic.nvmllib import SyntheticNVML


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return profiles.build("mig-pair", tmp_path / "mig-pair")


def nvml(host: Path) -> SyntheticNVML:
    return SyntheticNVML.from_file(str(host / ".synthetic/nvml.json"))


def placements(lib: SyntheticNVML, handle: object, profile_id: int) -> list[tuple[int, int]]:
    count = ctypes.c_uint(0)
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr, ctypes.byref(count))
    return [(p.start, p.size) for p in arr]


def profile(
    lib: SyntheticNVML, handle: object, which: int
) -> pynvml.c_nvmlGpuInstanceProfileInfo_v2_t:
    return lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, which)


def test_profiles_and_placements_of_h100_and_a100(host: Path) -> None:
    lib = nvml(host)
    h100, a100 = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    seen = {}
    for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):  # names come back as str
        try:
            info = profile(lib, h100, p)
        except pynvml.NVMLError_NotSupported:
            continue
        seen[info.name] = (info.sliceCount, info.instanceCount, info.memorySizeMB)
    assert seen == {
        "MIG 1g.10gb": (1, 7, 9984),
        "MIG 1g.10gb+me": (1, 1, 9984),
        "MIG 1g.20gb": (1, 4, 20096),
        "MIG 2g.20gb": (2, 3, 20096),
        "MIG 3g.40gb": (3, 2, 40448),
        "MIG 4g.40gb": (4, 1, 40448),
        "MIG 7g.80gb": (7, 1, 81152),
    }
    three = profile(lib, h100, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert placements(lib, h100, three.id) == [(0, 4), (4, 4)]
    one = profile(lib, a100, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    assert placements(lib, a100, one.id) == [(s, 1) for s in range(7)]
    assert profile(lib, a100, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE).multiprocessorCount == 98
    # version 1 of the structure has no name
    v1 = lib.nvmlDeviceGetGpuInstanceProfileInfo(h100, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 1)
    assert isinstance(v1, pynvml.c_nvmlGpuInstanceProfileInfo_t) and v1.id == 14
    # a short array is answered with INSUFFICIENT_SIZE and the count needed
    count = ctypes.c_uint(1)
    arr = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(h100, three.id, arr, ctypes.byref(count))
    assert count.value == 2


def test_create_and_destroy_keep_state_log_and_capability_files(host: Path) -> None:
    lib = nvml(host)
    h = lib.nvmlDeviceGetHandleByIndex(0)
    three = profile(lib, h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    place = pynvml.c_nvmlGpuInstancePlacement_t(4, 4)
    gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, three.id, place)
    info = lib.nvmlGpuInstanceGetInfo(gi)
    assert (info.profileId, info.placement.start, info.placement.size) == (three.id, 4, 4)
    ci = lib.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
    assert lib.nvmlComputeInstanceGetInfo(ci).id == 0
    caps = host / f"proc/driver/nvidia/capabilities/gpu0/mig/gi{info.id}"
    assert f"DeviceFileMinor: {cap_minor(0, info.id)}" in (caps / "access").read_text()
    assert (host / f"dev/nvidia-caps/nvidia-cap{cap_minor(0, info.id, 0)}").exists()

    # a second process (a restarted agent) sees the instance as a MIG device
    other = nvml(host)
    h2 = other.nvmlDeviceGetHandleByIndex(0)
    mig = other.nvmlDeviceGetMigDeviceHandleByIndex(h2, 0)
    assert other.nvmlDeviceGetName(mig).endswith("MIG 3g.40gb")
    assert other.nvmlDeviceGetGpuInstanceId(mig) == info.id
    count = ctypes.c_uint(4)
    arr = (pynvml.c_nvmlGpuInstance_t * 4)()
    other.nvmlDeviceGetGpuInstances(h2, three.id, arr, ctypes.byref(count))
    assert count.value == 1

    # overlapping placements and destroying a GPU instance with compute instances are refused
    two = profile(lib, h, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, two.id, pynvml.c_nvmlGpuInstancePlacement_t(4, 2)
        )
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, two.id, pynvml.c_nvmlGpuInstancePlacement_t(1, 2)
        )
    with pytest.raises(pynvml.NVMLError_InUse):
        lib.nvmlGpuInstanceDestroy(gi)
    lib.nvmlComputeInstanceDestroy(ci)
    lib.nvmlGpuInstanceDestroy(gi)
    assert not (caps / "access").exists()
    assert other.nvmlDeviceGetMaxMigDeviceCount(h2) == 7
    with pytest.raises(pynvml.NVMLError_NotFound):
        other.nvmlDeviceGetMigDeviceHandleByIndex(h2, 0)
    calls = [c["call"] for c in read_calls(host / ".synthetic")]
    assert calls == [
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
    ]


def test_mig_mode_is_pending_until_reset(host: Path) -> None:
    lib = nvml(host)
    h = lib.nvmlDeviceGetHandleByIndex(1)
    assert lib.nvmlDeviceGetMigMode(h) == [1, 1]
    gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(
        h,
        profile(lib, h, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE).id,
        pynvml.c_nvmlGpuInstancePlacement_t(0, 8),
    )
    with pytest.raises(pynvml.NVMLError_InUse):  # instances exist
        lib.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE)
    lib.nvmlGpuInstanceDestroy(gi)
    status = lib.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE)
    assert status == pynvml.NVML_ERROR_RESET_REQUIRED
    assert lib.nvmlDeviceGetMigMode(h) == [1, 0]
    reset_gpu(host / ".synthetic", lib.gpus, 1)
    assert lib.nvmlDeviceGetMigMode(h) == [0, 0]
    # profiles are listed outside MIG mode too (as a real H100 does), instances not made
    one = profile(lib, h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, one.id, pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
        )


def test_fixed_instances_of_the_dgx_and_faults(tmp_path: Path) -> None:
    root = profiles.build("dgx-h100", tmp_path / "dgx")
    lib = nvml(root)
    h = lib.nvmlDeviceGetHandleByIndex(7)
    three = profile(lib, h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    count = ctypes.c_uint(2)
    arr = (pynvml.c_nvmlGpuInstance_t * 2)()
    lib.nvmlDeviceGetGpuInstances(h, three.id, arr, ctypes.byref(count))
    assert lib.nvmlGpuInstanceGetInfo(arr[0]).placement.start == 4
    with pytest.raises(pynvml.NVMLError_InsufficientResources):  # every slice is taken
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, three.id, pynvml.c_nvmlGpuInstancePlacement_t(0, 4)
        )
    # GPUs without MIG support answer NOT_SUPPORTED
    desc = {"driverVersion": "550", "gpus": [
        {"busId": "00000000:01:00.0", "uuid": "GPU-x", "name": "NVIDIA L4", "memoryTotal": 1 << 34,
         "migMode": 0, "errors": {"nvmlDeviceCreateGpuInstanceWithPlacement": "NO_PERMISSION"}},
    ]}  # fmt: skip
    plain = SyntheticNVML(desc, tmp_path / "plain")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        plain.nvmlDeviceSetMigMode(plain.nvmlDeviceGetHandleByIndex(0), 1)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        plain.nvmlDeviceCreateGpuInstanceWithPlacement(
            plain.nvmlDeviceGetHandleByIndex(0), 9, pynvml.c_nvmlGpuInstancePlacement_t(0, 4)
        )


def test_the_media_engine_variant_is_one_at_a_time(host: Path) -> None:
    lib = nvml(host)
    h = lib.nvmlDeviceGetHandleByIndex(0)
    me = profile(lib, h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)
    assert (me.name, me.instanceCount) == ("MIG 1g.10gb+me", 1)
    lib.nvmlDeviceCreateGpuInstanceWithPlacement(
        h, me.id, pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
    )
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, me.id, pynvml.c_nvmlGpuInstancePlacement_t(1, 1)
        )
