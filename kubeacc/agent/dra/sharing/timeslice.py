"""A GPU's scheduling settings, read and changed on the device: compute mode and time slice.

* Compute mode through NVML (``nvmlDeviceGetComputeMode`` / ``nvmlDeviceSetComputeMode``):
  ``DEFAULT`` lets any number of processes share the GPU by time-slicing, ``EXCLUSIVE_PROCESS``
  lets only one process (the MPS server, when MPS serves the GPU) hold a context.
* The time slice of time-sliced scheduling through the driver's tool, ``nvidia-smi
  compute-policy -i <uuid> --set-timeslice=<0-3>`` (NVML has no call for it on bare metal; its
  scheduler calls are for vGPU hosts), read back with ``nvidia-smi compute-policy -l``.

Both come from the node's :class:`~kubeacc.host.Host`: its NVML and its driver tools.
"""

from __future__ import annotations

import threading
from typing import Any

import pynvml

from kubeacc.crds.api import TimeSlice
from kubeacc.host import Host, NvmlUnavailable
from kubeacc.host.tools import ToolError

COMPUTE_MODES = {
    pynvml.NVML_COMPUTEMODE_DEFAULT: "DEFAULT",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD: "EXCLUSIVE_THREAD",
    pynvml.NVML_COMPUTEMODE_PROHIBITED: "PROHIBITED",
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: "EXCLUSIVE_PROCESS",
}
#: ``--set-timeslice`` values.
TIMESLICES = {TimeSlice.DEFAULT: 0, TimeSlice.SHORT: 1, TimeSlice.MEDIUM: 2, TimeSlice.LONG: 3}
_SLICE_NAMES = {"default": 0, "short": 1, "medium": 2, "long": 3}


#: nvidia-smi's exit status for "not available on the target device".
SMI_NOT_SUPPORTED = 3


class ControlError(Exception):
    """The GPU refused a setting or could not be asked (the message says which and why)."""

    def __init__(self, message: str, *, not_supported: bool = False) -> None:
        super().__init__(message)
        #: The GPU does not have the feature at all (so it cannot have been changed either).
        self.not_supported = not_supported


class GpuControl:
    """NVML and ``nvidia-smi`` for the GPUs of one host."""

    def __init__(self, host: Host, nvml: Any | None = None) -> None:
        self.host = host
        self._nvml = nvml
        self._lock = threading.Lock()

    def nvml(self) -> Any:
        with self._lock:
            if self._nvml is None:
                self._nvml = self.host.nvml()
            return self._nvml

    def _call(self, bus_id: str, what: str, call: str, *args: Any) -> Any:
        try:
            nvml = self.nvml()
            handle = nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
            return getattr(nvml, call)(handle, *args)
        except NvmlUnavailable as exc:
            raise ControlError(f"GPU {bus_id}: {what}: {exc}") from None
        except pynvml.NVMLError as exc:
            unsupported = exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED
            raise ControlError(
                f"GPU {bus_id}: {what}: NVML {call}: {exc}", not_supported=unsupported
            ) from None

    def uuid(self, bus_id: str) -> str:
        value = self._call(bus_id, "reading its UUID", "nvmlDeviceGetUUID")
        return value.decode() if isinstance(value, bytes) else str(value)

    def compute_mode(self, bus_id: str) -> int:
        return int(self._call(bus_id, "reading the compute mode", "nvmlDeviceGetComputeMode"))

    def set_compute_mode(self, bus_id: str, mode: int) -> None:
        name = COMPUTE_MODES.get(mode, str(mode))
        self._call(bus_id, f"compute mode {name}", "nvmlDeviceSetComputeMode", mode)

    def timeslice(self, bus_id: str, uuid: str) -> int | None:
        """The GPU's time slice (0-3) from ``nvidia-smi compute-policy -l``; None when the GPU
        has none or the tool cannot say."""
        try:
            text = self._smi(f"GPU {bus_id}: reading the time slice", ["-l", "-i", uuid])
        except ControlError:
            return None
        for line in text.splitlines():
            fields = line.strip("| ").split()
            if len(fields) >= 3 and fields[1].lower() == "timeslice":
                return _SLICE_NAMES.get(fields[2].lower())
        return None

    def set_timeslice(self, bus_id: str, uuid: str, value: int) -> None:
        self._smi(f"GPU {bus_id}: time slice {value}", ["-i", uuid, f"--set-timeslice={value}"])

    def _smi(self, what: str, args: list[str]) -> str:
        try:
            return self.host.tools.run("nvidia-smi", ["compute-policy", *args])
        except ToolError as exc:
            raise ControlError(
                f"{what}: {exc}", not_supported=exc.status == SMI_NOT_SUPPORTED
            ) from None
