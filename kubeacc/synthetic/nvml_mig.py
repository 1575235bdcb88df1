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

from typing import Any

import pynvml

from kubeacc.synthetic import ids
from kubeacc.synthetic.mig_ctypes import (
    ci_handle,
    decode_ci,
    decode_gi,
    fill,
    gi_handle,
    nvml_error,
    profile_info,
)
from kubeacc.synthetic.mig_hw import (
    MAX_GPU_INSTANCES,
    GiProfile,
    cap_minor,
    cap_paths,
    profiles_for,
)
from kubeacc.synthetic.mig_state import MigState


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
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
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
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        entry: dict[str, Any] = self._mig_store().read()[str(index)]
        if not entry["mode"]:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return entry

    def _profile_by_id(self, index: int, profile_id: int) -> GiProfile:
        for p in self._profiles(index):
            if p.id == profile_id:
                return p
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

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
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._check_fault(call, index)
        migs = self.mig_view(index)[1]
        if mig >= len(migs):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
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
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
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
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            if not mode and entry["instances"]:
                raise nvml_error(pynvml.NVML_ERROR_IN_USE)
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
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in self._profiles(index):
            if p.profile == profile:
                break
        else:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = profile_info(
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
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        p = self._profile_by_id(index, profileId)
        items = []
        for start in p.starts:
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, p.size
            items.append(placement)
        fill(placementsRef, countRef, items)
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
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            taken: set[int] = set()
            for inst in entry["instances"]:
                taken.update(range(int(inst["start"]), int(inst["start"]) + int(inst["size"])))
            used = sum(self._slices_of(index, str(i["profile"])) for i in entry["instances"])
            same = sum(1 for i in entry["instances"] if int(i["profileId"]) == p.id)
            if taken & set(range(start, start + size)) or used + p.slices > 7:
                raise nvml_error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            if same >= p.instances:
                raise nvml_error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
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
        return gi_handle(index, gi)

    def _slices_of(self, index: int, profile: str) -> int:
        for p in self._profiles(index):
            if p.name == profile:
                return p.slices
        return 0

    def _instance(self, index: int, gi: int) -> dict[str, Any]:
        for inst in self._mig_on(index)["instances"]:
            if int(inst["gi"]) == gi:
                return dict(inst)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        index = self._device("nvmlDeviceGetGpuInstances", device)
        if not self._profiles(index):
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        entry = self._mig_store().read()[str(index)]
        self._profile_by_id(index, profileId)
        found = [
            gi_handle(index, int(i["gi"]))
            for i in sorted(entry["instances"], key=lambda i: int(i["gi"]))
            if int(i["profileId"]) == profileId
        ]
        fill(gpuInstancesRef, countRef, found)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        index = self._device("nvmlDeviceGetGpuInstanceById", device)
        self._instance(index, gpuInstanceId)
        return gi_handle(index, gpuInstanceId)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        index, gi = decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceGetInfo", index)
        inst = self._instance(index, gi)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id = gi
        info.profileId = int(inst["profileId"])
        info.placement.start = int(inst["start"])
        info.placement.size = int(inst["size"])
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        index, gi = decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceDestroy", index)
        self._mig_on(index)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            inst = next((i for i in entry["instances"] if int(i["gi"]) == gi), None)
            if inst is None:
                raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
            if inst["cis"]:
                raise nvml_error(pynvml.NVML_ERROR_IN_USE)
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
        index, gi = decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceGetComputeInstanceProfileInfo", index)
        inst = self._instance(index, gi)
        slices = self._slices_of(index, str(inst["profile"]))
        if profile != _ci_profile(slices) or engProfile != 0:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = profile_info(
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
        index, gi = decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceCreateComputeInstance", index)
        inst = self._instance(index, gi)
        if profileId != _ci_profile(self._slices_of(index, str(inst["profile"]))):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            live = next(i for i in entry["instances"] if int(i["gi"]) == gi)
            if live["cis"]:
                raise nvml_error(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
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
        return ci_handle(index, gi, 0)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        index, gi = decode_gi(gpuInstance)
        self._check_fault("nvmlGpuInstanceGetComputeInstances", index)
        inst = self._instance(index, gi)
        wanted = profileId == _ci_profile(self._slices_of(index, str(inst["profile"])))
        found = [ci_handle(index, gi, int(c["ci"])) for c in inst["cis"]] if wanted else []
        fill(computeInstancesRef, countRef, found)
        return int(pynvml.NVML_SUCCESS)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        index, gi, ci = decode_ci(computeInstance)
        self._check_fault("nvmlComputeInstanceGetInfo", index)
        inst = self._instance(index, gi)
        if not any(int(c["ci"]) == ci for c in inst["cis"]):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.gpuInstance = gi_handle(index, gi)
        info.id = ci
        info.profileId = _ci_profile(self._slices_of(index, str(inst["profile"])))
        return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        index, gi, ci = decode_ci(computeInstance)
        self._check_fault("nvmlComputeInstanceDestroy", index)
        self._mig_on(index)
        state = self._mig_store()
        with state.locked() as s:
            entry = s[str(index)]
            inst = next((i for i in entry["instances"] if int(i["gi"]) == gi), None)
            match = [c for c in (inst or {}).get("cis", []) if int(c["ci"]) == ci]
            if inst is None or not match:
                raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
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
