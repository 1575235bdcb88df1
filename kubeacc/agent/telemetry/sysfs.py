"""Figures of devices whose driver publishes them as files: AMD and Intel GPUs, FPGAs, NICs.

* hwmon (every type): ``<pci device>/hwmon/hwmon*`` -- ``temp1_input`` (millidegrees C),
  ``power1_average`` or ``power1_input`` and ``power1_cap`` (microwatts); for a DFL FPGA the
  hwmon of its FME below ``fpga_region/region*/dfl-fme.*``;
* amdgpu: ``gpu_busy_percent``, ``mem_busy_percent``, ``mem_info_vram_used``/``_total``;
* NICs: each netdev's ``statistics/{rx,tx}_{bytes,packets,errors,dropped}``, ``carrier`` and
  ``speed`` (Mb/s);
* DFL FPGA ports: ``dfl-port.*/errors/errors`` (the port error register).

Files a device does not have leave their series out; a device none of whose files can be read
reads ``up 0``. Reads go through the host's file view (:meth:`kubeacc.host.Host.files`).
"""

from __future__ import annotations

from collections.abc import Iterable

from kubeacc.agent.telemetry.series import Reading
from kubeacc.host.files import HostRoot
from kubeacc.model import Device, DeviceType

NET_COUNTERS = (
    ("bytes", "network_bytes"),
    ("packets", "network_packets"),
    ("errors", "network_errors"),
    ("dropped", "network_dropped"),
)
#: hwmon directories looked at per device at most (a device has one or two).
MAX_HWMON = 4


class SysfsReader:
    """Samples the non-NVIDIA devices of an inventory (module docstring)."""

    def read(self, files: HostRoot, devices: Iterable[Device]) -> list[Reading]:
        out: list[Reading] = []
        for dev in devices:
            if dev.vendor == "NVIDIA" or dev.pci is None:
                continue
            got: list[Reading] = []
            base = f"/sys/bus/pci/devices/{dev.pci.bus_id}"
            for hwmon in _hwmons(files, base, dev.type):
                got += _hwmon(files, hwmon, dev.name)
            if dev.type in (DeviceType.GPU, DeviceType.ACCELERATOR):
                got += _drm(files, base, dev.name)
            if dev.type == DeviceType.NIC or dev.netdevs:
                got += _netdevs(files, base, dev)
            if dev.type == DeviceType.FPGA:
                got += _ports(files, base, dev.name)
            if got:
                out.append(Reading("up", dev.name, 1))
                out += got
            elif files.exists(base):
                continue  # a device with no figures at all is not down, only silent
            else:
                out.append(Reading("up", dev.name, 0))
        return out


def _int(files: HostRoot, path: str) -> int | None:
    return files.read_int(path, required=False)


def _hwmons(files: HostRoot, base: str, kind: DeviceType) -> list[str]:
    found = [f"{base}/hwmon/{h}" for h in files.listdir(f"{base}/hwmon")]
    if kind == DeviceType.FPGA:
        for region in files.listdir(f"{base}/fpga_region"):
            r = f"{base}/fpga_region/{region}"
            for fme in (e for e in files.listdir(r) if e.startswith("dfl-fme.")):
                found += [f"{r}/{fme}/hwmon/{h}" for h in files.listdir(f"{r}/{fme}/hwmon")]
    return sorted(found)[:MAX_HWMON]


def _hwmon(files: HostRoot, d: str, device: str) -> list[Reading]:
    out = []
    temp = _int(files, f"{d}/temp1_input")
    if temp is not None:
        out.append(Reading("temperature_celsius", device, temp / 1000))
    for name in ("power1_average", "power1_input"):
        power = _int(files, f"{d}/{name}")
        if power is not None:
            out.append(Reading("power_watts", device, power / 1e6))
            break
    cap = _int(files, f"{d}/power1_cap")
    if cap is not None:
        out.append(Reading("power_limit_watts", device, cap / 1e6))
    return out


def _drm(files: HostRoot, base: str, device: str) -> list[Reading]:
    out = []
    for name, engine in (("gpu_busy_percent", "compute"), ("mem_busy_percent", "memory")):
        busy = _int(files, f"{base}/{name}")
        if busy is not None:
            out.append(Reading("utilization_ratio", device, busy / 100, (engine,)))
    used = _int(files, f"{base}/mem_info_vram_used")
    total = _int(files, f"{base}/mem_info_vram_total")
    if used is not None:
        out.append(Reading("memory_used_bytes", device, used))
    if total is not None:
        out.append(Reading("memory_total_bytes", device, total))
    return out


def _netdevs(files: HostRoot, base: str, dev: Device) -> list[Reading]:
    out = []
    for ifname in dev.netdevs or files.listdir(f"{base}/net"):
        d = f"{base}/net/{ifname}"
        for direction in ("rx", "tx"):
            for counter, metric in NET_COUNTERS:
                value = _int(files, f"{d}/statistics/{direction}_{counter}")
                if value is not None:
                    out.append(Reading(metric, dev.name, value, (ifname, direction)))
        carrier = _int(files, f"{d}/carrier")
        if carrier is not None:
            out.append(Reading("link_up", dev.name, 1 if carrier else 0, (ifname,)))
        speed = _int(files, f"{d}/speed")
        if speed is not None and speed > 0:
            out.append(Reading("link_speed_bits_per_second", dev.name, speed * 1e6, (ifname,)))
    return out


def _ports(files: HostRoot, base: str, device: str) -> list[Reading]:
    out = []
    for region in files.listdir(f"{base}/fpga_region"):
        r = f"{base}/fpga_region/{region}"
        for port in sorted(e for e in files.listdir(r) if e.startswith("dfl-port.")):
            value = files.read_int(f"{r}/{port}/errors/errors", base=16, required=False)
            if value is not None:
                out.append(Reading("port_errors", device, value, (port,)))
    return out
