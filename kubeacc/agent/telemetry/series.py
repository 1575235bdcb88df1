"""What a telemetry sample holds: readings, and the catalogue of the series they become."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True)
class Family:
    kind: Kind
    help: str
    #: Labels of this family beyond node, device, model and the holder's.
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """One figure of one device: ``metric`` names a :data:`FAMILIES` entry (without the
    ``kubeacc_device_`` prefix and a counter's ``_total``), ``labels`` its own label values in
    the family's order."""

    metric: str
    device: str
    value: float
    labels: tuple[str, ...] = ()


PREFIX = "kubeacc_device_"

FAMILIES: dict[str, Family] = {
    "up": Family(
        Kind.GAUGE,
        "1 when the device answered its last sample, 0 when it did not "
        "(an NVIDIA GPU fallen off the bus, unreadable sysfs).",
    ),
    "utilization_ratio": Family(
        Kind.GAUGE,
        "Busy fraction of an engine over the driver's last sampling period (0-1): compute "
        "(NVIDIA SM, amdgpu gpu_busy_percent), memory, encoder, decoder.",
        ("engine",),
    ),
    "memory_used_bytes": Family(Kind.GAUGE, "Device memory in use (per MIG instance too)."),
    "memory_total_bytes": Family(Kind.GAUGE, "Device memory (per MIG instance too)."),
    "memory_reserved_bytes": Family(
        Kind.GAUGE, "Device memory the driver keeps for itself (not in used, not free)."
    ),
    "temperature_celsius": Family(Kind.GAUGE, "Device temperature."),
    "power_watts": Family(Kind.GAUGE, "Power draw."),
    "power_limit_watts": Family(Kind.GAUGE, "Enforced power limit (cap)."),
    "clock_hertz": Family(Kind.GAUGE, "Current clock.", ("clock",)),
    "ecc_errors": Family(
        Kind.COUNTER, "ECC errors since the driver loaded (aggregate).", ("severity",)
    ),
    "xid_errors": Family(
        Kind.COUNTER, "XID critical error events seen by this agent, by XID code.", ("xid",)
    ),
    "last_xid": Family(Kind.GAUGE, "The last XID code seen on the device (0: none)."),
    "retired_pages": Family(Kind.GAUGE, "Pages retired for ECC errors, by cause.", ("cause",)),
    "remapped_rows": Family(Kind.GAUGE, "Rows remapped for memory errors.", ("severity",)),
    "row_remap_pending": Family(Kind.GAUGE, "1 when a row remap waits for a reset."),
    "row_remap_failure": Family(Kind.GAUGE, "1 when a row remap failed."),
    "pcie_replays": Family(Kind.COUNTER, "PCIe replays (link-level retransmissions)."),
    "pcie_bytes": Family(
        Kind.COUNTER, "Bytes moved over PCIe since the driver loaded.", ("direction",)
    ),
    "pcie_throughput_bytes_per_second": Family(
        Kind.GAUGE,
        "PCIe traffic over the driver's last 20 ms window (GPUs without the byte counters).",
        ("direction",),
    ),
    "nvlink_errors": Family(
        Kind.COUNTER, "NVLink data-link errors, by link and counter.", ("link", "counter")
    ),
    "network_bytes": Family(
        Kind.COUNTER, "Bytes through a NIC's interface.", ("interface", "direction")
    ),
    "network_packets": Family(
        Kind.COUNTER, "Packets through a NIC's interface.", ("interface", "direction")
    ),
    "network_errors": Family(
        Kind.COUNTER, "Receive/transmit errors of a NIC's interface.", ("interface", "direction")
    ),
    "network_dropped": Family(
        Kind.COUNTER, "Packets dropped by a NIC's interface.", ("interface", "direction")
    ),
    "link_up": Family(Kind.GAUGE, "1 when the interface has carrier.", ("interface",)),
    "link_speed_bits_per_second": Family(Kind.GAUGE, "Negotiated link speed.", ("interface",)),
    "port_errors": Family(Kind.GAUGE, "An FPGA port's error register (0: no error).", ("port",)),
}
