"""NVML answers for a synthetic host: the stand-in at the NVML call boundary.

A synthetic host root carries ``/.synthetic/nvml.json`` describing its GPUs. This class
answers the same calls, with the same argument and return shapes and the same error types
(``pynvml.NVMLError`` subclasses), as the ``pynvml`` module does for a real driver, so the
discovery code above it runs unchanged.

Faults are injected here, at the call boundary: a GPU entry's ``errors`` maps a call name to
the NVML error it answers for that GPU (``{"nvmlDeviceGetUUID": "GPU_IS_LOST"}``: the
``NVML_ERROR_*`` name without its prefix), for its MIG devices too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from kubeacc.host.files import read_regular
from kubeacc.synthetic.mig_state import MigState
from kubeacc.synthetic.nvml_mig import MigCalls
from kubeacc.synthetic.nvml_telemetry import TelemetryCalls

#: The description of an 8-GPU host is a few tens of KB.
DESCRIPTION_LIMIT = 4 << 20


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None


@dataclass(frozen=True)
class _PciInfo:
    busId: str
    pciDeviceId: int
    pciSubSystemId: int


@dataclass(frozen=True)
class _Memory:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class _MemoryV2:
    """``nvmlMemory_v2_t``: ``used`` without the driver's ``reserved`` part."""

    version: int
    total: int
    reserved: int
    free: int
    used: int


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def error_code(name: str) -> int:
    """``GPU_IS_LOST`` -> pynvml.NVML_ERROR_GPU_IS_LOST; ValueError for a name NVML lacks."""
    code = getattr(pynvml, f"NVML_ERROR_{name}", None)
    if not isinstance(code, int):
        raise ValueError(f"unknown NVML error {name!r}")
    return code


R = TypeVar("R")


def injectable(call: Callable[..., R]) -> Callable[..., R]:
    """A per-GPU call that answers the error its GPU's ``errors`` entry names, if any."""

    @functools.wraps(call)
    def checked(self: SyntheticNVML, target: _Handle | int, *args: Any) -> R:
        index = target.gpu if isinstance(target, _Handle) else target
        if 0 <= index < len(self.gpus):
            name = self.gpus[index].get("errors", {}).get(call.__name__)
            if name is not None:
                raise _err(error_code(name))
        return call(self, target, *args)

    return checked


class SyntheticNVML(TelemetryCalls, MigCalls):
    """Answers NVML calls from a description (see the module docstring); MIG calls from the
    host's MIG state when the description came from a host (:mod:`.mig_state`); the running
    figures (utilisation, errors, XID events) from :mod:`.nvml_telemetry`."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self, description: dict[str, Any], synthetic_dir: Path | None = None):
        self.driver_version = str(description["driverVersion"])
        self.cuda_version = int(description.get("cudaDriverVersion", 12000))
        self.gpus: list[dict[str, Any]] = list(description["gpus"])
        for gpu in self.gpus:
            for key in ("busId", "uuid", "name", "memoryTotal"):
                if key not in gpu:
                    raise KeyError(f"GPU entry without {key!r}")
            errors = gpu.get("errors", {})
            if not isinstance(errors, dict):
                raise ValueError("a GPU's 'errors' must map call names to NVML error names")
            for call, name in errors.items():
                if not callable(getattr(self, call, None)):
                    raise ValueError(f"'errors' names an unknown NVML call {call!r}")
                error_code(str(name))
        self.mig_state = MigState(synthetic_dir, self.gpus) if synthetic_dir else None
        #: Where ``telemetry.json`` is looked for (kubeacc.synthetic.nvml_telemetry).
        self.telemetry_dir = synthetic_dir

    @classmethod
    def from_file(cls, path: str) -> SyntheticNVML:
        data = json.loads(read_regular(path, DESCRIPTION_LIMIT))
        if not isinstance(data, dict):
            raise ValueError("NVML description must be a JSON object")
        return cls(data, Path(path).parent)

    def _check_fault(self, call: str, gpu: int) -> None:
        if 0 <= gpu < len(self.gpus):
            name = self.gpus[gpu].get("errors", {}).get(call)
            if name is not None:
                raise _err(error_code(name))

    def _gpu_index(self, handle: Any) -> int:
        if not isinstance(handle, _Handle) or handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.gpu

    # -- library --------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    @injectable
    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        if not 0 <= index < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].get("lost"):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        self._told(index)  # GPU_IS_LOST for a GPU the test has taken off the bus
        return _Handle(index)

    def _handle(self, index: int) -> _Handle:
        return _Handle(index)

    # -- per device -------------------------------------------------------------------------

    def _gpu(self, handle: _Handle) -> dict[str, Any]:
        return self.gpus[handle.gpu]

    def _mig(self, handle: _Handle) -> dict[str, Any]:
        assert handle.mig is not None
        migs = self.mig_view(handle.gpu)[1]
        if handle.mig >= len(migs):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)  # destroyed since the handle was taken
        return dict(migs[handle.mig])

    @injectable
    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> _PciInfo:
        gpu = self._gpu(handle)
        return _PciInfo(
            busId=gpu["busId"],
            pciDeviceId=int(gpu.get("pciDeviceId", 0x233010DE)),
            pciSubSystemId=int(gpu.get("pciSubSystemId", 0)),
        )

    @injectable
    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        gpu = self._gpu(handle)
        if handle.mig is not None:
            return f"{gpu['name']} MIG {self._mig(handle)['profile']}"
        return str(gpu["name"])

    @injectable
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        if handle.mig is not None:
            return str(self._mig(handle)["uuid"])
        return str(self._gpu(handle)["uuid"])

    @injectable
    def nvmlDeviceGetMemoryInfo(
        self, handle: _Handle, version: int | None = None
    ) -> _Memory | _MemoryV2:
        """As the driver answers: the first version counts the driver's reserve
        (telemetry ``memoryReserved``, default 0) as used; ``nvmlMemory_v2`` gives it apart."""
        told = self._told(handle.gpu)
        if handle.mig is not None:
            total = int(self._mig(handle)["memoryTotal"])
            reserved = 0
        else:
            total = int(self._gpu(handle)["memoryTotal"])
            reserved = min(total, int(told.get("memoryReserved", 0)))
        used = min(total - reserved, self._memory_used(handle.gpu, told, total))
        if version == pynvml.nvmlMemory_v2:
            free = total - reserved - used
            return _MemoryV2(pynvml.nvmlMemory_v2, total, reserved, free, used)
        if version is not None:
            raise _err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return _Memory(total=total, free=total - used - reserved, used=used + reserved)

    @injectable
    def nvmlDeviceGetSerial(self, handle: _Handle) -> str:
        serial = self._gpu(handle).get("serial")
        if serial is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return str(serial)

    @injectable
    def nvmlDeviceGetMinorNumber(self, handle: _Handle) -> int:
        return int(self._gpu(handle).get("minorNumber", handle.gpu))

    @injectable
    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:
        return int(self._gpu(handle).get("numaNode", -1))

    @injectable
    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return TelemetryCalls.nvmlDeviceGetTemperature(self, handle, sensor)

    @injectable
    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        rows = self._gpu(handle).get("remappedRows")
        if rows is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (
            int(rows.get("correctable", 0)),
            int(rows.get("uncorrectable", 0)),
            int(bool(rows.get("pending", False))),
            int(bool(rows.get("failure", False))),
        )

    @injectable
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return 7 if self.mig_view(handle.gpu)[0] else 0

    @injectable
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        migs = self.mig_view(handle.gpu)[1]
        if not 0 <= index < len(migs):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(handle.gpu, index)

    def _link(self, handle: _Handle, link: int) -> dict[str, Any]:
        for entry in self._gpu(handle).get("nvlinks", []):
            if int(entry["link"]) == link:
                return dict(entry)
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @injectable
    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        entry = self._link(handle, link)
        return pynvml.NVML_FEATURE_ENABLED if entry.get("active", True) else 0

    @injectable
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _Handle, link: int) -> _PciInfo:
        entry = self._link(handle, link)
        return _PciInfo(busId=entry["remoteBusId"], pciDeviceId=0, pciSubSystemId=0)
