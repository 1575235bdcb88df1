"""Sensor and counter files of synthetic devices: hwmon, amdgpu busy figures, netdev statistics.

Real drivers expose a device's running figures as files: a ``hwmon/hwmonN`` directory under
the device (``temp1_input`` in millidegrees Celsius, ``power1_average`` / ``power1_input`` and
``power1_cap`` in microwatts), amdgpu's ``gpu_busy_percent`` and ``mem_busy_percent``, a
netdev's ``statistics/*`` counters, a DFL port's ``errors/errors`` register. A synthetic tree
starts them at plausible idle values; a test changes a figure or injects a fault by writing
the file, as the kernel would change it.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from kubeacc.synthetic.fsw import TreeWriter

NETDEV_COUNTERS = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)


def write_hwmon(
    w: TreeWriter,
    device: PurePosixPath,
    index: int,
    name: str,
    *,
    temp_mc: int = 38000,
    power_uw: int | None = None,
    power_cap_uw: int | None = None,
    power_file: str = "power1_average",
) -> PurePosixPath:
    """``<device>/hwmon/hwmon<index>`` with a temperature and, given, power and its cap."""
    d = device / "hwmon" / f"hwmon{index}"
    w.attr(d / "name", name)
    w.attr(d / "temp1_input", temp_mc)
    if power_uw is not None:
        w.attr(d / power_file, power_uw)
    if power_cap_uw is not None:
        w.attr(d / "power1_cap", power_cap_uw)
    w.symlink(f"/sys/class/hwmon/hwmon{index}", d)
    return d


def write_netdev_statistics(w: TreeWriter, netdev: PurePosixPath) -> None:
    for counter in NETDEV_COUNTERS:
        w.attr(netdev / "statistics" / counter, 0)
