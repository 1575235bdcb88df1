"""Dynamic MIG for the synthetic NVML: profiles, placements, GPU and compute instances.

The calls keep the names, arguments and return shapes of nvidia-ml-py (``pynvml``): profile
information comes back as the library's ``c_nvmlGpuInstanceProfileInfo_v2_t`` structures,
possible placements and instance lists are written into the caller's ctypes arrays and count,
GPU and compute instance handles are ``c_nvmlGpuInstance_t`` / ``c_nvmlComputeInstance_t``
pointers (opaque: never dereferenced, only handed back).

State lives next to the host's NVML description, so every process that opens the synthetic
host (a restarted agent, the test) sees the same instances:

* ``/.synthetic/nvml-mig.json``: per GPU the MIG mode (current and pending) and its instances,
  written at the first change; before it, or when the description was edited since (a new
  "boot"), the description's ``migMode`` and ``migDevices`` are the state;
* ``/.synthetic/nvml-calls.log``: one JSON line per call that changed something (create and
  destroy of instances, MIG mode), in order, append-only: what a test reads back.

Creating a GPU or compute instance also makes its capability file appear under
``/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<id>[/ci<id>]/access`` and its
``/dev/nvidia-caps/nvidia-cap<N>`` node, as the driver does, with the driver's numbering of
capability minors (see :func:`cap_minor`).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

from kubeacc.synthetic import ids

STATE_FILE = "nvml-mig.json"
CALL_LOG = "nvml-calls.log"
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


# -- ctypes plumbing ----------------------------------------------------------------------------

_GI_TAG = 0x4D470000  # "MG"
_CI_TAG = 0x4D430000  # "MC"


def _gi_handle(gpu: int, gi: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(_GI_TAG | gpu << 8 | gi), pynvml.c_nvmlGpuInstance_t)


def _ci_handle(gpu: int, gi: int, ci: int) -> Any:
    value = _CI_TAG | gpu << 12 | gi << 4 | ci
    return ctypes.cast(ctypes.c_void_p(value), pynvml.c_nvmlComputeInstance_t)


def _address(handle: Any) -> int:
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (ctypes.ArgumentError, TypeError):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None


def _decode_gi(handle: Any) -> tuple[int, int]:
    v = _address(handle)
    if v & 0xFFFF0000 != _GI_TAG:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return (v >> 8) & 0xFF, v & 0xFF


def _decode_ci(handle: Any) -> tuple[int, int, int]:
    v = _address(handle)
    if v & 0xFFFF0000 != _CI_TAG:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return (v >> 12) & 0xF, (v >> 4) & 0xFF, v & 0xF


def _set_count(ref: Any, value: int) -> None:
    """Write through a ``byref(c_uint)`` or ``pointer(c_uint)`` count argument."""
    target = getattr(ref, "_obj", None)
    if target is None:
        target = ref.contents
    target.value = value


def _get_count(ref: Any) -> int:
    target = getattr(ref, "_obj", None)
    if target is None:
        target = ref.contents
    return int(target.value)


def _fill(array: Any, count_ref: Any, items: list[Any]) -> None:
    """NVML's list convention: a NULL array asks for the count; a short one is an error."""
    if array is None:
        _set_count(count_ref, len(items))
        return
    if len(items) > min(_get_count(count_ref), len(array)):
        _set_count(count_ref, len(items))
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    for i, item in enumerate(items):
        array[i] = item
    _set_count(count_ref, len(items))


def _profile_info(version: int, v1: type[Any], v2: type[Any], name: str) -> Any:
    """An empty profile-info struct of the version asked (v2 carries the profile's name)."""
    if version == 2:
        info = v2()
        info.name = name.encode()
        return info
    if version == 1:
        return v1()
    raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


# -- state --------------------------------------------------------------------------------------


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


# -- the calls ----------------------------------------------------------------------------------


class MigCalls:
    """The MIG half of :class:`kubeacc.synthetic.nvmllib.SyntheticNVML` (a mixin)."""

    gpus: list[dict[str, Any]]
    mig_state: MigState | None

    # provided by SyntheticNVML
    def _check_fault(self, call: str, gpu: int) -> None:
        raise NotImplementedError

    def _gpu_index(self, handle: Any) -> int:
        raise NotImplementedError

    def _mig_store(self) -> MigState:
        if self.mig_state is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.mig_state

    def _device(self, call: str, handle: Any) -> int:
        index = self._gpu_index(handle)
        self._check_fault(call, index)
        return index

    def _profiles(self, index: int) -> tuple[GiProfile, ...]:
        gpu = self.gpus[index]
        return profiles_for(str(gpu["name"]), int(gpu["memoryTotal"]))

    def _mig_on(self, index: int) -> dict[str, Any]:
        """The GPU's state entry; NOT_SUPPORTED unless MIG mode is on."""
        if not self._profiles(index):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        entry: dict[str, Any] = self._mig_store().read()[str(index)]
        if not entry["mode"]:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return entry

    def _profile_by_id(self, index: int, profile_id: int) -> GiProfile:
        for p in self._profiles(index):
            if p.id == profile_id:
                return p
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def mig_view(self, index: int) -> tuple[int, list[dict[str, Any]]]:
        """(current MIG mode, MIG devices as the description's ``migDevices`` lists them)."""
        gpu = self.gpus[index]
        if self.mig_state is None:
            return int(gpu.get("migMode", 0)), list(gpu.get("migDevices", []))
        entry = self.mig_state.read()[str(index)]
        devices: list[dict[str, Any]] = []
        for inst in sorted(entry["instances"], key=lambda i: int(i["gi"])):
            for ci in inst["cis"]:
                devices.append(
                    {
                        "index": len(devices),
                        "uuid": ci["uuid"],
                        "profile": inst["profile"],
                        "memoryTotal": inst["memoryTotal"],
                        "gpuInstanceId": inst["gi"],
                        "computeInstanceId": ci["ci"],
                    }
                )
        return int(entry["mode"]), devices

    def _mig_device(self, call: str, device: Any) -> dict[str, Any]:
        index, mig = getattr(device, "gpu", -1), getattr(device, "mig", None)
        if mig is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._check_fault(call, index)
        migs = self.mig_view(index)[1]
        if mig >= len(migs):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return dict(migs[mig])

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return int(self._mig_device("nvmlDeviceGetGpuInstanceId", device)["gpuInstanceId"])

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return int(self._mig_device("nvmlDeviceGetComputeInstanceId", device)["computeInstanceId"])

    # -- MIG mode -------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        index = self._device("nvmlDeviceGetMigMode", device)
        gpu = self.gpus[index]
        if "migMode" not in gpu:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.mig_state is None:
            mode = int(gpu["migMode"])
            return [mode, mode]
        entry = self.mig_state.read()[str(index)]
        return [int(entry["mode"]), int(entry["pending"])]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        """Sets the pending mode; it takes effect at the next GPU reset (the activation status
        says so). Turning MIG off while instances exist is refused (IN_USE)."""
        index = self._device("nvmlDeviceSetMigMode", device)
        if not self._profiles(index):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            if not mode and entry["instances"]:
                raise _err(pynvml.NVML_ERROR_IN_USE)
            entry["pending"] = int(mode)
            status = (
                pynvml.NVML_SUCCESS
                if entry["pending"] == entry["mode"]
                else pynvml.NVML_ERROR_RESET_REQUIRED
            )
        state.record("nvmlDeviceSetMigMode", index, mode=int(mode), activationStatus=status)
        return int(status)

    # -- profiles and placements ----------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        index = self._device("nvmlDeviceGetGpuInstanceProfileInfo", device)
        if not self._profiles(index):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in self._profiles(index):
            if p.profile == profile:
                break
        else:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = _profile_info(
            version,
            pynvml.c_nvmlGpuInstanceProfileInfo_t,
            pynvml.c_nvmlGpuInstanceProfileInfo_v2_t,
            f"MIG {p.name}",
        )
        info.id = p.id
        info.isP2pSupported = 0
        info.sliceCount = p.slices
        info.instanceCount = p.instances
        info.multiprocessorCount = p.multiprocessors
        info.copyEngineCount = max(1, p.slices)
        info.decoderCount = p.slices // 2 + (1 if p.slices == 7 else 0)
        info.memorySizeMB = p.memory_mib
        return info

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        index = self._device("nvmlDeviceGetGpuInstancePossiblePlacements", device)
        if not self._profiles(index):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        p = self._profile_by_id(index, profileId)
        items = []
        for start in p.starts:
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, p.size
            items.append(placement)
        _fill(placementsRef, countRef, items)
        return int(pynvml.NVML_SUCCESS)

    # -- GPU instances --------------------------------------------------------------------------

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profileId: int, placement: Any
    ) -> Any:
        index = self._device("nvmlDeviceCreateGpuInstanceWithPlacement", device)
        self._mig_on(index)
        p = self._profile_by_id(index, profileId)
        start, size = int(placement.start), int(placement.size)
        if start not in p.starts or size != p.size:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            taken: set[int] = set()
            for inst in entry["instances"]:
                taken.update(range(int(inst["start"]), int(inst["start"]) + int(inst["size"])))
            used = sum(self._slices_of(index, str(i["profile"])) for i in entry["instances"])
            same = sum(1 for i in entry["instances"] if int(i["profileId"]) == p.id)
            if taken & set(range(start, start + size)) or used + p.slices > 7:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            if same >= p.instances:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            ids_used = {int(i["gi"]) for i in entry["instances"]}
            gi = min(n for n in range(1, MAX_GPU_INSTANCES) if n not in ids_used)
            entry["instances"].append(
                {
                    "gi": gi,
                    "profileId": p.id,
                    "profile": p.name,
                    "start": start,
                    "size": size,
                    "memoryTotal": p.memory_mib << 20,
                    "cis": [],
                }
            )
        minor = int(self.gpus[index].get("minorNumber", index))
        proc, dev = cap_paths(minor, gi)
        state.host_file(proc, _access(cap_minor(minor, gi)))
        state.host_file(dev, "")
        state.record(
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            index,
            profile=p.name,
            start=start,
            size=size,
            gpuInstanceId=gi,
        )
        return _gi_handle(index, gi)

    def _slices_of(self, index: int, profile: str) -> int:
        for p in self._profiles(index):
            if p.name == profile:
                return p.slices
        return 0

    def _instance(self, index: int, gi: int) -> dict[str, Any]:
        for inst in self._mig_on(index)["instances"]:
            if int(inst["gi"]) == gi:
                return dict(inst)
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        index = self._device("nvmlDeviceGetGpuInstances", device)
        if not self._profiles(index):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        entry = self._mig_store().read()[str(index)]
        self._profile_by_id(index, profileId)
        found = [
            _gi_handle(index, int(i["gi"]))
            for i in sorted(entry["instances"], key=lambda i: int(i["gi"]))
            if int(i["profileId"]) == profileId
        ]
        _fill(gpuInstancesRef, countRef, found)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        index = self._device("nvmlDeviceGetGpuInstanceById", device)
        self._instance(index, gpuInstanceId)
        return _gi_handle(index, gpuInstanceId)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        index, gi = _decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceGetInfo", index)
        inst = self._instance(index, gi)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id = gi
        info.profileId = int(inst["profileId"])
        info.placement.start = int(inst["start"])
        info.placement.size = int(inst["size"])
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        index, gi = _decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceDestroy", index)
        self._mig_on(index)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            inst = next((i for i in entry["instances"] if int(i["gi"]) == gi), None)
            if inst is None:
                raise _err(pynvml.NVML_ERROR_NOT_FOUND)
            if inst["cis"]:
                raise _err(pynvml.NVML_ERROR_IN_USE)
            entry["instances"].remove(inst)
        minor = int(self.gpus[index].get("minorNumber", index))
        proc, dev = cap_paths(minor, gi)
        state.host_file(proc, None)
        state.host_file(dev, None)
        state.record("nvmlGpuInstanceDestroy", index, gpuInstanceId=gi, profile=inst["profile"])
        return int(pynvml.NVML_SUCCESS)

    # -- compute instances ----------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpuInstance: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        """Only the compute-instance profile that spans the whole GPU instance exists here."""
        index, gi = _decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceGetComputeInstanceProfileInfo", index)
        inst = self._instance(index, gi)
        slices = self._slices_of(index, str(inst["profile"]))
        if profile != _ci_profile(slices) or engProfile != 0:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = _profile_info(
            version,
            pynvml.c_nvmlComputeInstanceProfileInfo_t,
            pynvml.c_nvmlComputeInstanceProfileInfo_v2_t,
            f"MIG {inst['profile']}",
        )
        info.id = profile
        info.sliceCount = slices
        info.instanceCount = 1
        return info

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        index, gi = _decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceCreateComputeInstance", index)
        inst = self._instance(index, gi)
        if profileId != _ci_profile(self._slices_of(index, str(inst["profile"]))):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            live = next(i for i in entry["instances"] if int(i["gi"]) == gi)
            if live["cis"]:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            entry["made"] = int(entry.get("made", 0)) + 1
            uuid = "MIG-" + ids.make_uuid(str(gpu["uuid"]), f"mig/{gi}/{entry['made']}")
            live["cis"].append({"ci": 0, "uuid": uuid})
        minor = int(gpu.get("minorNumber", index))
        proc, dev = cap_paths(minor, gi, 0)
        state.host_file(proc, _access(cap_minor(minor, gi, 0)))
        state.host_file(dev, "")
        state.record(
            "nvmlGpuInstanceCreateComputeInstance",
            index,
            gpuInstanceId=gi,
            computeInstanceId=0,
            uuid=uuid,
        )
        return _ci_handle(index, gi, 0)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        index, gi = _decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceGetComputeInstances", index)
        inst = self._instance(index, gi)
        wanted = profileId == _ci_profile(self._slices_of(index, str(inst["profile"])))
        found = [_ci_handle(index, gi, int(c["ci"])) for c in inst["cis"]] if wanted else []
        _fill(computeInstancesRef, countRef, found)
        return int(pynvml.NVML_SUCCESS)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        index, gi, ci = _decode_ci(computeInstance)
        self._check_fault("nvmlComputeInstanceGetInfo", index)
        inst = self._instance(index, gi)
        if not any(int(c["ci"]) == ci for c in inst["cis"]):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.gpuInstance = _gi_handle(index, gi)
        info.id = ci
        info.profileId = _ci_profile(self._slices_of(index, str(inst["profile"])))
        return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        index, gi, ci = _decode_ci(computeInstance)
        self._check_fault("nvmlComputeInstanceDestroy", index)
        self._mig_on(index)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            inst = next((i for i in entry["instances"] if int(i["gi"]) == gi), None)
            match = [c for c in (inst or {}).get("cis", []) if int(c["ci"]) == ci]
            if inst is None or not match:
                raise _err(pynvml.NVML_ERROR_NOT_FOUND)
            inst["cis"].remove(match[0])
        minor = int(self.gpus[index].get("minorNumber", index))
        proc, dev = cap_paths(minor, gi, ci)
        state.host_file(proc, None)
        state.host_file(dev, None)
        state.record(
            "nvmlComputeInstanceDestroy",
            index,
            gpuInstanceId=gi,
            computeInstanceId=ci,
            uuid=match[0]["uuid"],
        )
        return int(pynvml.NVML_SUCCESS)


def _ci_profile(slices: int) -> int:
    """The NVML_COMPUTE_INSTANCE_PROFILE_* constant of a compute instance of ``slices``."""
    p = pynvml
    table = {
        1: p.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        2: p.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        3: p.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        4: p.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        7: p.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    }
    return int(table.get(slices, -1))


def _access(minor: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
