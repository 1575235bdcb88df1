"""The ctypes side of the synthetic NVML's MIG calls: opaque GPU/compute instance handles, NVML's
list-and-count convention, the profile-info structures of each version, and NVML errors."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

_GI_TAG = 0x4D470000  # "MG"
_CI_TAG = 0x4D430000  # "MC"


def gi_handle(gpu: int, gi: int) -> Any:
    return ctypes.cast(ctypes.c_void_p(_GI_TAG | gpu << 8 | gi), pynvml.c_nvmlGpuInstance_t)


def ci_handle(gpu: int, gi: int, ci: int) -> Any:
    value = _CI_TAG | gpu << 12 | gi << 4 | ci
    return ctypes.cast(ctypes.c_void_p(value), pynvml.c_nvmlComputeInstance_t)


def address(handle: Any) -> int:
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (ctypes.ArgumentError, TypeError):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None


def decode_gi(handle: Any) -> tuple[int, int]:
    v = address(handle)
    if v & 0xFFFF0000 != _GI_TAG:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return (v >> 8) & 0xFF, v & 0xFF


def decode_ci(handle: Any) -> tuple[int, int, int]:
    v = address(handle)
    if v & 0xFFFF0000 != _CI_TAG:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return (v >> 12) & 0xF, (v >> 4) & 0xFF, v & 0xF


def set_count(ref: Any, value: int) -> None:
    """Write through a ``byref(c_uint)`` or ``pointer(c_uint)`` count argument."""
    target = getattr(ref, "_obj", None)
    if target is None:
        target = ref.contents
    target.value = value


def get_count(ref: Any) -> int:
    target = getattr(ref, "_obj", None)
    if target is None:
        target = ref.contents
    return int(target.value)


def fill(array: Any, count_ref: Any, items: list[Any]) -> None:
    """NVML's list convention: a NULL array asks for the count; a short one is an error."""
    if array is None:
        set_count(count_ref, len(items))
        return
    if len(items) > min(get_count(count_ref), len(array)):
        set_count(count_ref, len(items))
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    for i, item in enumerate(items):
        array[i] = item
    set_count(count_ref, len(items))


def profile_info(version: int, v1: type[Any], v2: type[Any], name: str) -> Any:
    """An empty profile-info struct of the version asked (v2 carries the profile's name)."""
    if version == 2:
        info = v2()
        info.name = name.encode()
        return info
    if version == 1:
        return v1()
    raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)
