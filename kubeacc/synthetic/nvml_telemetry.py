"""The synthetic NVML's running figures: utilisation, memory, power, errors and XID events.

A synthetic GPU is never idle in the same way twice: without instructions its utilisation,
memory use, temperature, power, clocks and PCIe traffic follow a slow wave of the wall clock
(each GPU out of phase with the next), so a metrics scrape a few seconds after another sees
them move. A test (or a person with a demo host) takes over through
``/.synthetic/telemetry.json``, re-read whenever it changes::

    {"gpus": {"<uuid or index>": {
        "utilization": {"gpu": 93, "memory": 40}, "encoder": 12, "decoder": 3,
        "memoryUsed": 1073741824, "temperature": 81, "power": 310000,
        "ecc": {"corrected": 4, "uncorrected": 1},
        "retiredPages": {"singleBit": 2, "doubleBit": 1},
        "pcieReplay": 7, "pcieTxBytes": 4096, "pcieCounters": true,
        "nvlinkErrors": {"0": {"replay": 3, "recovery": 1, "crcFlit": 0}},
        "xids": [79],
        "lost": true}}}

Every key is optional; a key present replaces the wave's figure. ``xids`` is the GPU's XID
history, oldest first: an event set registered for ``nvmlEventTypeXidCriticalError`` delivers
each entry once, in order (appending to the list injects a new event). ``lost`` makes every
call on that GPU answer ``GPU_IS_LOST``, as a GPU fallen off the bus does. MIG devices answer
memory use (a share of their GPU's); utilisation on a MIG device is ``NOT_SUPPORTED``, as it
is on real drivers.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml

from kubeacc.host.files import read_regular

TELEMETRY_JSON = "telemetry.json"
#: A telemetry file is a few KB; anything far larger is a mistake, not a description.
TELEMETRY_LIMIT = 1 << 20
#: Seconds of one period of the synthetic load wave.
PERIOD_S = 120.0


@dataclass(frozen=True)
class _Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True)
class _MemoryUse:
    total: int
    free: int
    used: int


@dataclass
class _EventSet:
    """What ``nvmlEventSetCreate`` returns: registered GPUs and what each was given."""

    gpus: dict[int, int] = field(default_factory=dict)  # gpu index -> event mask
    delivered: dict[int, int] = field(default_factory=dict)  # gpu index -> XIDs handed out


@dataclass(frozen=True)
class _Ull:
    ullVal: int


@dataclass(frozen=True)
class _FieldValue:
    """``c_nvmlFieldValue_t``'s fields that a reader looks at."""

    fieldId: int
    nvmlReturn: int
    value: _Ull


@dataclass(frozen=True)
class _EventData:
    """``c_nvmlEventData_t``'s fields."""

    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class TelemetryCalls:
    """NVML's sampling calls for :class:`~kubeacc.synthetic.nvmllib.SyntheticNVML`."""

    gpus: list[dict[str, Any]]
    telemetry_dir: Path | None
    _telemetry_cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None

    # Provided by SyntheticNVML.
    def _gpu(self, handle: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _mig(self, handle: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _handle(self, index: int) -> Any:
        raise NotImplementedError

    # -- the instructions ----------------------------------------------------------------------
    def _telemetry(self) -> dict[str, Any]:
        if self.telemetry_dir is None:
            return {}
        path = self.telemetry_dir / TELEMETRY_JSON
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return {}
        # Size and change time too: two writes within one timestamp tick differ in one of them.
        mtime = (st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        cached = self._telemetry_cache
        if cached is not None and cached[0] == mtime:
            return cached[1]
        data = json.loads(read_regular(str(path), TELEMETRY_LIMIT))
        gpus = data.get("gpus", {}) if isinstance(data, dict) else None
        if not isinstance(gpus, dict):
            raise ValueError(f"{path}: 'gpus' must map a GPU's UUID or index to its figures")
        self._telemetry_cache = (mtime, gpus)
        return gpus

    def _told(self, index: int) -> dict[str, Any]:
        gpus = self._telemetry()
        entry = gpus.get(str(self.gpus[index]["uuid"])) or gpus.get(str(index)) or {}
        if entry.get("lost"):
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return dict(entry)

    def _whole(self, handle: Any) -> tuple[int, dict[str, Any]]:
        """The GPU index and its instructions; NOT_SUPPORTED for a MIG handle."""
        if handle.mig is not None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle.gpu, self._told(handle.gpu)

    @staticmethod
    def _load(index: int) -> float:
        """The wave: 0..1, one period every PERIOD_S, GPUs out of phase."""
        return 0.5 + 0.45 * math.sin(2 * math.pi * time.time() / PERIOD_S + index * 0.9)

    # -- utilisation, memory, thermals, power, clocks -----------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _Utilization:
        index, told = self._whole(handle)
        load = self._load(index)
        util = told.get("utilization", {})
        return _Utilization(
            gpu=int(util.get("gpu", round(100 * load))),
            memory=int(util.get("memory", round(60 * load))),
        )

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        _, told = self._whole(handle)
        return [int(told.get("encoder", 0)), 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        _, told = self._whole(handle)
        return [int(told.get("decoder", 0)), 167000]

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        index, told = self._whole(handle)
        base = int(self._gpu(handle).get("temperature", 35))
        return int(told.get("temperature", base + round(40 * self._load(index))))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        index, told = self._whole(handle)
        limit = int(self._gpu(handle).get("powerLimit", 700000))
        return int(told.get("power", round(limit * (0.1 + 0.8 * self._load(index)))))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        self._whole(handle)
        return int(self._gpu(handle).get("powerLimit", 700000))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        index, told = self._whole(handle)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return int(told.get("memoryClock", 2619))
        return int(told.get("smClock", 345 + round(1635 * self._load(index))))

    def _memory_used(self, index: int, told: dict[str, Any], total: int) -> int:
        used = told.get("memoryUsed")
        return int(used) if used is not None else round(total * 0.8 * self._load(index))

    # -- errors --------------------------------------------------------------------------------
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        _, told = self._whole(handle)
        ecc = told.get("ecc", {})
        key = (
            "uncorrected"
            if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            else "corrected"
        )
        return int(ecc.get(key, 0))

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        _, told = self._whole(handle)
        pages = told.get("retiredPages", {})
        double = cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        count = int(pages.get("doubleBit" if double else "singleBit", 0))
        return [0x1000 * (n + 1) for n in range(count)]

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        _, told = self._whole(handle)
        return int(told.get("pcieReplay", 0))

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        index, told = self._whole(handle)
        key = "pcieTx" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "pcieRx"
        return int(told.get(key, round(2_000_000 * self._load(index))))  # KB/s

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[int]) -> list[_FieldValue]:
        """The PCIe byte counters (fields 197/198): ``pcieTxBytes``/``pcieRxBytes`` when told,
        else growing with the wall clock; ``"pcieCounters": false`` makes the GPU an older one
        that does not have them. Other fields: NOT_SUPPORTED."""
        index, told = self._whole(handle)
        out = []
        for fid in field_ids:
            key = {197: "pcieTxBytes", 198: "pcieRxBytes"}.get(fid)
            if key is None or told.get("pcieCounters") is False:
                out.append(_FieldValue(fid, pynvml.NVML_ERROR_NOT_SUPPORTED, _Ull(0)))
                continue
            default = int(time.time() * 1_500_000) * (index + 1) * (2 if fid == 197 else 1)
            out.append(_FieldValue(fid, pynvml.NVML_SUCCESS, _Ull(int(told.get(key, default)))))
        return out

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        _, told = self._whole(handle)
        if not any(int(e["link"]) == link for e in self._gpu(handle).get("nvlinks", [])):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        names = {
            pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
            pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
            pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crcFlit",
            pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crcData",
        }
        return int(told.get("nvlinkErrors", {}).get(str(link), {}).get(names[counter], 0))

    # -- events --------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:
        return _EventSet()

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: _EventSet) -> None:
        index, told = self._whole(handle)
        event_set.gpus[index] = event_set.gpus.get(index, 0) | event_types
        # Only what happens from now on is an event (as with a real driver).
        event_set.delivered.setdefault(index, len(told.get("xids", [])))

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeoutms: int) -> _EventData:
        for index, mask in sorted(event_set.gpus.items()):
            if not mask & pynvml.nvmlEventTypeXidCriticalError:
                continue
            try:
                xids = self._told(index).get("xids", [])
            except pynvml.NVMLError:
                continue  # a lost GPU sends nothing more
            done = event_set.delivered.get(index, 0)
            if done < len(xids):
                event_set.delivered[index] = done + 1
                return _EventData(
                    self._handle(index), pynvml.nvmlEventTypeXidCriticalError, int(xids[done]), 0, 0
                )
        raise _err(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        event_set.gpus.clear()
