"""NVIDIA telemetry from the synthetic NVML: figures move, faults show, XIDs count once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml

from kubeacc.agent.telemetry.nvidia import NvidiaReader
from kubeacc.agent.telemetry.series import Reading
from kubeacc.model import Inventory
from kubeacc.synthetic.host import SyntheticHost
from tests.hosts import HostFactory, discover


def _tell(root: Path, gpus: dict[str, Any]) -> None:
    path = root / ".synthetic" / "telemetry.json"
    path.write_text(json.dumps({"gpus": gpus}))


def _value(readings: list[Reading], metric: str, device: str, *labels: str) -> float:
    found = [
        r.value for r in readings if (r.metric, r.device, r.labels) == (metric, device, labels)
    ]
    assert len(found) == 1, (metric, device, labels, found)
    return found[0]


def _setup(hosts: HostFactory) -> tuple[Path, SyntheticHost, Inventory, NvidiaReader]:
    root = hosts.copy("dgx-h100")
    host = SyntheticHost(root)
    inv = discover(host)
    return root, host, inv, NvidiaReader(host.nvml)


def test_every_gpu_reports_its_figures(hosts: HostFactory) -> None:
    _, _, inv, reader = _setup(hosts)
    readings = reader.read(inv.devices)
    gpus = [d for d in inv.devices if d.vendor == "NVIDIA"]
    assert len(gpus) == 8
    for gpu in gpus:
        assert _value(readings, "up", gpu.name) == 1
        assert 0 <= _value(readings, "utilization_ratio", gpu.name, "compute") <= 1
        assert _value(readings, "memory_total_bytes", gpu.name) == gpu.memory_bytes
        assert _value(readings, "power_limit_watts", gpu.name) == 700
        assert _value(readings, "ecc_errors", gpu.name, "uncorrected") == 0
        # 18 NVLinks, four counters each
        assert (
            len([r for r in readings if r.metric == "nvlink_errors" and r.device == gpu.name]) == 72
        )


def test_figures_move_and_injected_errors_show(hosts: HostFactory) -> None:
    root, _, inv, reader = _setup(hosts)
    gpu = next(d for d in inv.devices if d.vendor == "NVIDIA")
    assert gpu.uuid is not None
    _tell(root, {gpu.uuid: {"utilization": {"gpu": 20}, "memoryUsed": 1 << 30, "temperature": 50}})
    first = reader.read(inv.devices)
    assert _value(first, "utilization_ratio", gpu.name, "compute") == 0.2
    assert _value(first, "memory_used_bytes", gpu.name) == 1 << 30
    faults = {
        "utilization": {"gpu": 97},
        "memoryUsed": 40 << 30,
        "temperature": 88,
        "ecc": {"uncorrected": 2, "corrected": 9},
        "pcieReplay": 5,
        "retiredPages": {"doubleBit": 1},
        "nvlinkErrors": {"3": {"crcFlit": 4}},
    }
    _tell(root, {gpu.uuid: faults})
    second = reader.read(inv.devices)
    assert _value(second, "utilization_ratio", gpu.name, "compute") == 0.97
    assert _value(second, "memory_used_bytes", gpu.name) == 40 << 30
    assert _value(second, "temperature_celsius", gpu.name) == 88
    assert _value(second, "ecc_errors", gpu.name, "uncorrected") == 2
    assert _value(second, "ecc_errors", gpu.name, "corrected") == 9
    assert _value(second, "pcie_replays", gpu.name) == 5
    assert _value(second, "retired_pages", gpu.name, "double_bit") == 1
    assert _value(second, "nvlink_errors", gpu.name, "3", "crc_flit") == 4
    other = next(d for d in inv.devices if d.vendor == "NVIDIA" and d.name != gpu.name)
    assert _value(second, "ecc_errors", other.name, "uncorrected") == 0


def test_xid_events_count_once_each(hosts: HostFactory) -> None:
    root, _, inv, reader = _setup(hosts)
    gpu = next(d for d in inv.devices if d.vendor == "NVIDIA" and d.index == 2)
    assert gpu.uuid is not None
    _tell(root, {gpu.uuid: {"xids": [13]}})  # history before the agent looked: not an event
    readings = reader.read(inv.devices)
    assert _value(readings, "last_xid", gpu.name) == 0
    assert not [r for r in readings if r.metric == "xid_errors"]
    _tell(root, {gpu.uuid: {"xids": [13, 79, 48]}})
    readings = reader.read(inv.devices)
    assert _value(readings, "xid_errors", gpu.name, "79") == 1
    assert _value(readings, "xid_errors", gpu.name, "48") == 1
    assert _value(readings, "last_xid", gpu.name) == 48
    readings = reader.read(inv.devices)  # nothing new: the counts stand
    assert _value(readings, "xid_errors", gpu.name, "79") == 1
    _tell(root, {gpu.uuid: {"xids": [13, 79, 48, 79]}})
    readings = reader.read(inv.devices)
    assert _value(readings, "xid_errors", gpu.name, "79") == 2
    assert _value(readings, "last_xid", gpu.name) == 79


def test_gpu_fallen_off_the_bus_reads_down(hosts: HostFactory) -> None:
    root, _, inv, reader = _setup(hosts)
    gpu = next(d for d in inv.devices if d.vendor == "NVIDIA" and d.index == 5)
    assert gpu.uuid is not None
    reader.read(inv.devices)
    _tell(root, {gpu.uuid: {"lost": True}})
    readings = reader.read(inv.devices)
    assert _value(readings, "up", gpu.name) == 0
    assert not [r for r in readings if r.device == gpu.name and r.metric == "temperature_celsius"]
    assert sum(_value(readings, "up", d.name) for d in inv.devices if d.vendor == "NVIDIA") == 7


def test_host_without_nvml_reads_gpus_down(hosts: HostFactory) -> None:
    _, _, inv, _ = _setup(hosts)
    readings = NvidiaReader(lambda: None).read(inv.devices)
    assert {r.metric for r in readings} == {"up"}
    assert {r.value for r in readings} == {0}


class _FirstVersionOnly:
    """A driver without ``nvmlMemory_v2`` (older than 510): the versioned call is not there."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._lib, name)
        if name != "nvmlDeviceGetMemoryInfo":
            return call

        def first(handle: Any, *version: Any) -> Any:
            if version:
                raise self._lib.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return call(handle)

        return first


def test_memory_used_leaves_the_driver_reserve_out(hosts: HostFactory) -> None:
    root, host, inv, reader = _setup(hosts)
    gpu = next(d for d in inv.devices if d.vendor == "NVIDIA")
    assert gpu.uuid is not None
    _tell(root, {gpu.uuid: {"memoryUsed": 1 << 30, "memoryReserved": 480 << 20}})
    got = reader.read(inv.devices)
    assert _value(got, "memory_used_bytes", gpu.name) == 1 << 30
    assert _value(got, "memory_reserved_bytes", gpu.name) == 480 << 20
    assert _value(got, "memory_total_bytes", gpu.name) == gpu.memory_bytes

    older = NvidiaReader(lambda: _FirstVersionOnly(host.nvml())).read(inv.devices)
    # Without the second version the reserve is in used, as that driver reports it.
    assert _value(older, "memory_used_bytes", gpu.name) == (1 << 30) + (480 << 20)
    assert not [r for r in older if r.metric == "memory_reserved_bytes"]


def test_pcie_traffic_is_a_byte_counter_where_the_gpu_has_one(hosts: HostFactory) -> None:
    root, _, inv, reader = _setup(hosts)
    gpus = [d for d in inv.devices if d.vendor == "NVIDIA"]
    new, old = gpus[0], gpus[1]
    assert new.uuid is not None and old.uuid is not None
    _tell(root, {new.uuid: {"pcieTxBytes": 7 << 30}, old.uuid: {"pcieCounters": False}})
    got = reader.read(inv.devices)
    assert _value(got, "pcie_bytes", new.name, "tx") == 7 << 30
    assert _value(got, "pcie_bytes", new.name, "rx") > 0
    sampled = [r for r in got if r.metric == "pcie_throughput_bytes_per_second"]
    assert not [r for r in sampled if r.device == new.name]
    # An older GPU without the counters: the 20 ms throughput sample instead.
    assert _value(got, "pcie_throughput_bytes_per_second", old.name, "tx") >= 0
    assert not [r for r in got if r.metric == "pcie_bytes" and r.device == old.name]
