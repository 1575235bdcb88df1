"""The ``MigMode`` operation: turn a GPU's MIG mode on or off (NVML, then a GPU reset).

NVML only records the wanted mode as *pending*; it takes effect when the GPU is reset. The GPU
must be idle: the controller and the life-cycle agent refuse a target whose Accelerator lists
users (``status.allocatedTo``, which counts the claims of its MIG partitions), and NVML refuses
to turn MIG off while GPU instances exist. After the reset the mode is read back; a mode that
did not take is set back to what it was, so a failed operation leaves nothing pending.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pynvml

from kubeacc.host import Host, NvmlUnavailable
from kubeacc.host.kernel import HostError
from kubeacc.model import Device, DeviceType
from kubeacc.node.operations.outcome import Outcome


def _nvml(host: Host) -> Any:
    try:
        return host.nvml()
    except NvmlUnavailable:
        raise HostError("NVMLUnavailable", "NVML is not available on this node") from None


def _handle(nvml: Any, bus_id: str) -> Any:
    want = bus_id.lower()[-12:]
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        bus = nvml.nvmlDeviceGetPciInfo(h).busId
        bus = bus.decode() if isinstance(bus, bytes) else str(bus)
        if bus.lower()[-12:] == want:
            return h
    raise HostError("DeviceNotFound", f"NVML does not know the GPU at {bus_id}")


def set_mig_mode(
    host: Host, device: Device, enabled: bool, reset: Callable[[Device], Outcome]
) -> Outcome:
    """Set the GPU's MIG mode through the host's NVML, then ``reset`` the GPU (module docstring)."""
    if device.type is not DeviceType.GPU or device.vendor.lower() != "nvidia" or not device.pci:
        raise HostError("NotAnNvidiaGPU", f"{device.name} is not an NVIDIA GPU")
    want = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
    word = "on" if enabled else "off"
    nvml = _nvml(host)
    handle = _handle(nvml, device.pci.bus_id)
    try:
        current, pending = nvml.nvmlDeviceGetMigMode(handle)
        if current == want:
            if pending != want:  # clear a different pending mode
                nvml.nvmlDeviceSetMigMode(handle, want)
            return Outcome(True, "MigModeUnchanged", f"{device.name}: MIG mode already {word}")
        nvml.nvmlDeviceSetMigMode(handle, want)
    except pynvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
            raise HostError("MigUnsupported", f"{device.name} has no MIG mode") from None
        if code == pynvml.NVML_ERROR_IN_USE:
            raise HostError(
                "MigInstancesExist",
                f"{device.name} still has MIG instances; they go with the claims that hold "
                "them (or an administrator destroys them)",
            ) from None
        raise HostError("NVMLError", f"{device.name}: setting MIG mode {word}: {exc}") from None
    try:
        reset(device)
        after = nvml.nvmlDeviceGetMigMode(handle)
    except (HostError, pynvml.NVMLError) as exc:
        _restore(nvml, handle, current)
        raise HostError(
            "ResetFailed", f"{device.name}: MIG mode {word} not applied: {exc}"
        ) from None
    if after[0] != want:
        _restore(nvml, handle, current)
        raise HostError(
            "MigModeNotApplied", f"{device.name}: MIG mode still {after[0]} after the reset"
        )
    return Outcome(True, "MigModeSet", f"{device.name}: MIG mode {word} (GPU reset)")


def _restore(nvml: Any, handle: Any, mode: int) -> None:
    # Should this fail too, the pending mode stays and the next reset applies it.
    with contextlib.suppress(pynvml.NVMLError):
        nvml.nvmlDeviceSetMigMode(handle, mode)
