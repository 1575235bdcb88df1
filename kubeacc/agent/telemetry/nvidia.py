"""NVIDIA GPUs' figures through NVML (the host's, :meth:`kubeacc.host.Host.nvml`).

One pass asks each GPU of the inventory, found by its PCI address, for its utilisation,
memory, temperature, power, clocks and error counters, and each of its MIG instances for its
memory; a call the GPU does not support (``NOT_SUPPORTED``, ``FUNCTION_NOT_FOUND`` on older
drivers) only leaves its series out. A GPU that cannot be reached at all (``GPU_IS_LOST``:
fallen off the bus) reads ``up 0``.

XID errors arrive as NVML events: an event set registered once per GPU for critical XIDs is
drained (without waiting) at each pass, and every event counts in
``kubeacc_device_xid_errors_total{xid}`` and sets ``kubeacc_device_last_xid``.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from kubeacc.agent.telemetry.series import Reading
from kubeacc.model import Device
from kubeacc.model.accelerator import LinkKind

log = logging.getLogger(__name__)

#: nvmlEventTypeXidCriticalError (NVML's event mask bit).
XID_EVENTS = 0x8
#: NVML_NVLINK_ERROR_DL_* and their label.
NVLINK_COUNTERS = ((0, "replay"), (1, "recovery"), (2, "crc_flit"), (3, "crc_data"))
#: NVML_FI_DEV_PCIE_COUNT_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES and their direction label.
PCIE_BYTE_FIELDS = {197: "tx", 198: "rx"}
#: Events drained per pass at most (a storm of XIDs must not hold the sampler).
MAX_EVENTS = 256


def nvml_bus_id(bus_id: str) -> str:
    """``0000:3d:00.0`` as NVML spells it: ``00000000:3D:00.0``."""
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


class NvidiaReader:
    """Samples the NVIDIA GPUs of an inventory (module docstring)."""

    def __init__(self, nvml: Callable[[], Any | None]) -> None:
        self._open = nvml
        self._lib: Any | None = None
        self._events: Any | None = None
        self._registered: set[str] = set()
        #: uuid -> device name, for events (they name the GPU by handle).
        self._by_uuid: dict[str, str] = {}
        self.xids: dict[str, Counter[int]] = {}
        self.last_xid: dict[str, int] = {}

    def _nvml(self) -> Any | None:
        if self._lib is None:
            self._lib = self._open()
        return self._lib

    def read(self, devices: Iterable[Device]) -> list[Reading]:
        gpus = [d for d in devices if d.vendor == "NVIDIA" and d.pci is not None]
        if not gpus:
            return []
        lib = self._nvml()
        if lib is None:
            return [Reading("up", d.name, 0) for d in gpus]
        out: list[Reading] = []
        for dev in gpus:
            out += self._gpu(lib, dev)
        self._drain(lib)
        for dev in gpus:
            for xid, n in sorted(self.xids.get(dev.name, Counter()).items()):
                out.append(Reading("xid_errors", dev.name, n, (str(xid),)))
            out.append(Reading("last_xid", dev.name, self.last_xid.get(dev.name, 0)))
        return out

    def _gpu(self, lib: Any, dev: Device) -> list[Reading]:
        assert dev.pci is not None
        name = dev.name
        try:
            handle = lib.nvmlDeviceGetHandleByPciBusId(nvml_bus_id(dev.pci.bus_id))
            uuid = str(lib.nvmlDeviceGetUUID(handle))
        except lib.NVMLError as err:
            log.debug("%s: no NVML handle (%s)", name, err)
            return [Reading("up", name, 0)]
        self._by_uuid[uuid] = name
        out = [Reading("up", name, 1)]
        ask = _Asker(lib, out, name)
        util = ask("nvmlDeviceGetUtilizationRates", handle)
        if util is not None:
            out.append(Reading("utilization_ratio", name, util.gpu / 100, ("compute",)))
            out.append(Reading("utilization_ratio", name, util.memory / 100, ("memory",)))
        for engine, call in (
            ("encoder", "nvmlDeviceGetEncoderUtilization"),
            ("decoder", "nvmlDeviceGetDecoderUtilization"),
        ):
            codec = ask(call, handle)
            if codec is not None:
                out.append(Reading("utilization_ratio", name, codec[0] / 100, (engine,)))
        out += _memory(ask, handle, name)
        ask.value("temperature_celsius", "nvmlDeviceGetTemperature", handle, 0)  # _GPU sensor
        ask.value("power_watts", "nvmlDeviceGetPowerUsage", handle, scale=1e-3)
        ask.value("power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit", handle, scale=1e-3)
        ask.value("clock_hertz", "nvmlDeviceGetClockInfo", handle, 1, scale=1e6, labels=("sm",))
        ask.value("clock_hertz", "nvmlDeviceGetClockInfo", handle, 2, scale=1e6, labels=("memory",))
        # NVML_MEMORY_ERROR_TYPE_{CORRECTED,UNCORRECTED} x NVML_AGGREGATE_ECC
        ask.value("ecc_errors", "nvmlDeviceGetTotalEccErrors", handle, 0, 1, labels=("corrected",))
        ask.value(
            "ecc_errors", "nvmlDeviceGetTotalEccErrors", handle, 1, 1, labels=("uncorrected",)
        )
        for cause, label in ((0, "single_bit"), (1, "double_bit")):
            pages = ask("nvmlDeviceGetRetiredPages", handle, cause)
            if pages is not None:
                out.append(Reading("retired_pages", name, len(pages), (label,)))
        rows = ask("nvmlDeviceGetRemappedRows", handle)
        if rows is not None:
            out.append(Reading("remapped_rows", name, rows[0], ("correctable",)))
            out.append(Reading("remapped_rows", name, rows[1], ("uncorrectable",)))
            out.append(Reading("row_remap_pending", name, rows[2]))
            out.append(Reading("row_remap_failure", name, rows[3]))
        ask.value("pcie_replays", "nvmlDeviceGetPcieReplayCounter", handle)
        out += _pcie_traffic(ask, handle, name)
        # The inventory counts a GPU's NVLinks; NVML numbers them from 0.
        for link in range(sum(x.count for x in dev.links if x.kind == LinkKind.NVLINK)):
            for counter, label in NVLINK_COUNTERS:
                ask.value(
                    "nvlink_errors",
                    "nvmlDeviceGetNvLinkErrorCounter",
                    handle,
                    link,
                    counter,
                    labels=(str(link), label),
                )
        out += self._migs(lib, handle, dev)
        self._register(lib, handle, uuid)
        return out

    def _migs(self, lib: Any, handle: Any, dev: Device) -> list[Reading]:
        by_uuid = {p.uuid: p.name for p in dev.partitions if p.uuid}
        if not by_uuid:
            return []
        out: list[Reading] = []
        ask = _Asker(lib, out, dev.name)
        count = ask("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        for i in range(int(count)):
            mig = ask("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            uuid = ask("nvmlDeviceGetUUID", mig) if mig is not None else None
            part = by_uuid.get(str(uuid)) if uuid is not None else None
            if part is None:
                continue
            out += _memory(ask, mig, part)
        return out

    # -- XID events ------------------------------------------------------------------------
    def _register(self, lib: Any, handle: Any, uuid: str) -> None:
        if uuid in self._registered:
            return
        try:
            if self._events is None:
                self._events = lib.nvmlEventSetCreate()
            lib.nvmlDeviceRegisterEvents(handle, XID_EVENTS, self._events)
        except (lib.NVMLError, AttributeError) as err:
            log.debug("XID events of %s not available: %s", uuid, err)
        self._registered.add(uuid)  # asked once; a GPU without events stays without

    def _drain(self, lib: Any) -> None:
        if self._events is None:
            return
        for _ in range(MAX_EVENTS):
            try:
                event = lib.nvmlEventSetWait_v2(self._events, 0)
            except lib.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing pending
            try:
                name = self._by_uuid.get(str(lib.nvmlDeviceGetUUID(event.device)))
            except lib.NVMLError:
                name = None
            if name is None:
                continue
            xid = int(event.eventData)
            self.xids.setdefault(name, Counter())[xid] += 1
            self.last_xid[name] = xid
            log.warning("%s: XID %d", name, xid)

    def close(self) -> None:
        if self._events is not None and self._lib is not None:
            with contextlib.suppress(Exception):  # closing: nothing to do about it
                self._lib.nvmlEventSetFree(self._events)
        self._events = None


def _pcie_traffic(ask: _Asker, handle: Any, device: str) -> list[Reading]:
    """PCIe bytes moved, as the driver's running counters (field values, read at once); a GPU
    without them gives ``nvmlDeviceGetPcieThroughput``, which samples 20 ms per direction
    (measured on an H100: 21 ms of wall time, under 1 ms of CPU, per call)."""
    fields = ask("nvmlDeviceGetFieldValues", handle, list(PCIE_BYTE_FIELDS))
    if fields is not None and all(int(f.nvmlReturn) == 0 for f in fields):
        return [
            Reading("pcie_bytes", device, float(f.value.ullVal), (direction,))
            for f, direction in zip(fields, PCIE_BYTE_FIELDS.values(), strict=True)
        ]
    out: list[Reading] = []
    for counter, direction in enumerate(PCIE_BYTE_FIELDS.values()):  # NVML_PCIE_UTIL_TX/RX
        kbs = ask("nvmlDeviceGetPcieThroughput", handle, counter)
        if kbs is not None:
            out.append(
                Reading("pcie_throughput_bytes_per_second", device, kbs * 1024.0, (direction,))
            )
    return out


def _memory(ask: _Asker, handle: Any, device: str) -> list[Reading]:
    """Memory used, reserved and total. The second version of the call keeps the driver's own
    reserve out of ``used`` (as nvidia-smi shows it: on an H100 with driver 580 the first
    version's ``used`` is ~480 MiB higher); drivers without it answer the first."""
    v2 = getattr(ask.lib, "nvmlMemory_v2", None)
    memory = ask("nvmlDeviceGetMemoryInfo", handle, v2) if v2 is not None else None
    out = []
    if memory is not None:
        out.append(Reading("memory_reserved_bytes", device, memory.reserved))
    else:
        memory = ask("nvmlDeviceGetMemoryInfo", handle)
    if memory is not None:
        out.append(Reading("memory_used_bytes", device, memory.used))
        out.append(Reading("memory_total_bytes", device, memory.total))
    return out


class _Asker:
    """One NVML call, None when the GPU does not answer it (the series is then left out)."""

    def __init__(self, lib: Any, out: list[Reading], device: str) -> None:
        self.lib = lib
        self.out = out
        self.device = device

    def __call__(self, call: str, *args: Any) -> Any | None:
        fn = getattr(self.lib, call, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.lib.NVMLError:
            return None

    def value(
        self,
        metric: str,
        call: str,
        *args: Any,
        scale: float = 1.0,
        labels: tuple[str, ...] = (),
    ) -> None:
        got = self(call, *args)
        if got is not None:
            self.out.append(Reading(metric, self.device, float(got) * scale, labels))
