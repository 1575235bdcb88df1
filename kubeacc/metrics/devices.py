"""Device telemetry as scraped: the agents' ``kubeacc_device_*`` series folded into one row per
device (for ``kubeacc top``; the series are documented in docs/install.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "kubeacc_device_"


@dataclass
class DeviceRow:
    node: str
    device: str
    model: str
    up: bool = True
    utilization: float | None = None  # compute engine, 0-1
    memory_used: float | None = None
    memory_total: float | None = None
    temperature: float | None = None
    power: float | None = None
    errors: float = 0.0  # uncorrected ECC + XID events + port errors
    holders: list[str] = field(default_factory=list)

    def key(self) -> tuple[str, str]:
        return (self.node, self.device)


def _holder(labels: dict[str, str]) -> str:
    ns, pod = labels.get("namespace", ""), labels.get("pod", "")
    if not ns:
        return ""
    who = f"{ns}/{pod}" if pod else f"{ns}/claim:{labels.get('claim', '')}"
    if labels.get("container"):
        who += f"/{labels['container']}"
    return who


def parse(text: str) -> list[DeviceRow]:
    """The device rows of one agent's ``/metrics`` text; ValueError when it is not the
    Prometheus text format."""
    rows: dict[tuple[str, str], DeviceRow] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX):
            continue
        for s in family.samples:
            labels = s.labels
            node, device = labels.get("node", ""), labels.get("device", "")
            if not device:
                continue
            row = rows.get((node, device))
            if row is None:
                row = rows[(node, device)] = DeviceRow(node, device, labels.get("model", ""))
            who = _holder(labels)
            if who and who not in row.holders:
                row.holders.append(who)
            name = s.name.removeprefix(PREFIX)
            if name == "up":
                row.up = s.value >= 1
            elif name == "utilization_ratio" and labels.get("engine") == "compute":
                row.utilization = s.value
            elif name == "memory_used_bytes":
                row.memory_used = s.value
            elif name == "memory_total_bytes":
                row.memory_total = s.value
            elif name == "temperature_celsius":
                row.temperature = s.value
            elif name == "power_watts":
                row.power = s.value
            elif _counts_as_error(name, labels) and who == (row.holders[0] if row.holders else ""):
                row.errors += s.value  # once per device, not per holder
    return sorted(rows.values(), key=DeviceRow.key)


def _counts_as_error(name: str, labels: dict[str, str]) -> bool:
    if name == "ecc_errors_total":
        return labels.get("severity") == "uncorrected"
    return name in ("xid_errors_total", "port_errors")
