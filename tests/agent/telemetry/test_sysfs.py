"""Telemetry from sysfs: AMD GPUs, NICs and DFL FPGAs, as the test changes their files."""

from __future__ import annotations

from pathlib import Path

from kubeacc.agent.telemetry.series import Reading
from kubeacc.agent.telemetry.sysfs import SysfsReader
from kubeacc.host.files import HostRoot
from kubeacc.model import DeviceType, Inventory
from tests.hosts import HostFactory, discover


def _value(readings: list[Reading], metric: str, device: str, *labels: str) -> float:
    found = [
        r.value for r in readings if (r.metric, r.device, r.labels) == (metric, device, labels)
    ]
    assert len(found) == 1, (metric, device, labels, found)
    return found[0]


def _dev_dir(root: Path, bus_id: str) -> Path:
    return (root / "sys/bus/pci/devices" / bus_id).resolve()


def _read(root: Path, inv: Inventory) -> list[Reading]:
    return SysfsReader().read(HostRoot(root), inv.devices)


def test_amd_gpu_busy_memory_and_hwmon_move(hosts: HostFactory) -> None:
    root = hosts.copy("amd-gpu")
    inv = discover(root)
    gpu = next(d for d in inv.devices if d.type == DeviceType.GPU and d.vendor != "NVIDIA")
    assert gpu.pci is not None
    before = _read(root, inv)
    assert _value(before, "up", gpu.name) == 1
    assert _value(before, "utilization_ratio", gpu.name, "compute") == 0
    d = _dev_dir(root, gpu.pci.bus_id)
    (d / "gpu_busy_percent").write_text("64\n")
    (d / "mem_info_vram_used").write_text(f"{3 << 30}\n")
    hwmon = next((d / "hwmon").iterdir())
    (hwmon / "temp1_input").write_text("71500\n")
    (hwmon / "power1_average").write_text("212000000\n")
    after = _read(root, inv)
    assert _value(after, "utilization_ratio", gpu.name, "compute") == 0.64
    assert _value(after, "memory_used_bytes", gpu.name) == 3 << 30
    assert _value(after, "temperature_celsius", gpu.name) == 71.5
    assert _value(after, "power_watts", gpu.name) == 212
    assert _value(after, "power_limit_watts", gpu.name) == 300


def test_nic_counters_and_link_state(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    inv = discover(root)
    nic = next(d for d in inv.devices if d.type == DeviceType.NIC and d.netdevs)
    assert nic.pci is not None
    ifname = nic.netdevs[0]
    assert _value(_read(root, inv), "link_up", nic.name, ifname) == 1
    net = _dev_dir(root, nic.pci.bus_id) / "net" / ifname
    (net / "statistics" / "rx_bytes").write_text("123456789\n")
    (net / "statistics" / "tx_errors").write_text("3\n")
    (net / "carrier").write_text("0\n")
    after = _read(root, inv)
    assert _value(after, "network_bytes", nic.name, ifname, "rx") == 123456789
    assert _value(after, "network_errors", nic.name, ifname, "tx") == 3
    assert _value(after, "link_up", nic.name, ifname) == 0
    assert _value(after, "link_speed_bits_per_second", nic.name, ifname) == 400e9


def test_fpga_port_error_and_temperature(hosts: HostFactory) -> None:
    root = hosts.copy("intel-fpga-dfl")
    inv = discover(root)
    fpga = next(d for d in inv.devices if d.type == DeviceType.FPGA)
    assert fpga.pci is not None
    before = _read(root, inv)
    port = next(r.labels[0] for r in before if r.metric == "port_errors" and r.device == fpga.name)
    assert _value(before, "port_errors", fpga.name, port) == 0
    assert _value(before, "temperature_celsius", fpga.name) == 38
    region = next((_dev_dir(root, fpga.pci.bus_id) / "fpga_region").iterdir())
    (region / port / "errors" / "errors").write_text("0x10\n")
    assert _value(_read(root, inv), "port_errors", fpga.name, port) == 16


def test_device_gone_from_sysfs_reads_down(hosts: HostFactory) -> None:
    root = hosts.copy("amd-gpu")
    inv = discover(root)
    gpu = next(d for d in inv.devices if d.type == DeviceType.GPU and d.vendor != "NVIDIA")
    assert gpu.pci is not None
    (root / "sys/bus/pci/devices" / gpu.pci.bus_id).unlink()
    assert _value(_read(root, inv), "up", gpu.name) == 0
