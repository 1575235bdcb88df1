"""``kubeacc discover``: what is on this node (or on a host tree)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from kubeacc.cli.errors import fail
from kubeacc.cli.hosts import HostKind, HostKindOption, check_host_root, open_host
from kubeacc.cli.output import Format, OutputOption, dump, is_table, print_table
from kubeacc.cli.typerize import typer_command
from kubeacc.discovery import ConfigError, discover, load_config
from kubeacc.model import Device, DeviceType, Inventory


def _gib(value: int | None) -> str:
    return f"{value / 2**30:.0f} GiB" if value else ""


def type_facts(dev: Device) -> str:
    """The facts that matter for this type of device, in one cell."""
    facts: list[str] = []
    if dev.memory_bytes:
        facts.append(_gib(dev.memory_bytes))
    if dev.uuid:
        facts.append(dev.uuid)
    if dev.links:
        facts.append(f"{sum(link.count for link in dev.links)} links to {len(dev.links)} peers")
    if dev.fpga:
        facts.append(f"{dev.fpga.driver.value} interface={dev.fpga.interface_id or '-'}")
        facts.append(f"afu={dev.fpga.afu_id or 'none'}")
    if dev.netdevs:
        facts.append("net=" + ",".join(dev.netdevs))
    if dev.rdma_devices:
        facts.append("rdma=" + ",".join(dev.rdma_devices))
    if dev.sriov:
        facts.append(f"VFs {dev.sriov.num_vfs}/{dev.sriov.total_vfs}")
    migs = [p for p in dev.partitions if p.kind.value == "mig"]
    if migs:
        facts.append(f"MIG x{len(migs)}")
    return " ".join(facts)


COLUMNS = ("TYPE", "NAME", "VENDOR", "MODEL", "BDF", "NUMA", "PCIE ROOT", "HEALTH", "DETAILS")


def render_table(inv: Inventory, console: Console | None = None, *, wide: bool = False) -> None:
    rows: list[list[str | Text]] = []
    for dev in inv.devices:
        health: str | Text = dev.health.state.value
        if not dev.health.healthy:
            health = Text(f"{dev.health.state.value} {dev.health.reason}".strip(), style="red")
        rows.append(
            [
                dev.type.value,
                dev.name,
                dev.vendor,
                dev.model,
                dev.pci_bus_id or "",
                str(dev.numa_node),
                dev.pcie_root or "",
                health,
                type_facts(dev),
            ]
        )
    print_table(
        COLUMNS,
        rows,
        title=f"Accelerators on {inv.hostname or 'host'}",
        wrap=("DETAILS",),
        optional=("VENDOR", "PCIE ROOT", "DETAILS", "NUMA"),
        console=console,
        wide=wide,
    )


def no_devices_hint(host_root: Path, types: list[DeviceType] | None) -> str:
    what = "/".join(t.value for t in types) + " accelerators" if types else "accelerators"
    hint = f"no {what} found under {host_root}"
    if host_root == Path("/"):
        return (
            hint + " (in a container? mount the host's /sys, /dev and /proc and pass --host-root)"
        )
    return hint + " (is it a host root with sys/bus/pci/devices?)"


@typer_command
def discover_command(
    host_root: Annotated[
        Path, typer.Option("--host-root", help="Root of the host's /sys, /dev and /proc.")
    ] = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    output: OutputOption = Format.TABLE,
    types: Annotated[
        list[DeviceType] | None,
        typer.Option("--type", "-t", help="Only devices of this type (repeatable)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Admin-defined devices (DiscoveryConfig YAML)."),
    ] = None,
    nvml: Annotated[
        str, typer.Option(help="Use NVML: auto, on or off.", case_sensitive=False)
    ] = "auto",
) -> None:
    """Discover the accelerators of a host: GPUs, FPGAs, NICs, XPUs and other accelerators."""
    check_host_root(host_root)
    if nvml not in ("auto", "on", "off"):
        fail(f"--nvml must be auto, on or off, not {nvml!r}")
    try:
        cfg = load_config(config) if config is not None else None
    except ConfigError as exc:
        fail(str(exc))
    inv = discover(open_host(host_root, host_kind), config=cfg, nvml=nvml, types=types)
    if is_table(output):
        render_table(inv, wide=output is Format.WIDE)
    else:
        sys.stdout.write(dump(inv.to_json_dict(), output))
    for warning in inv.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if not inv.devices:
        typer.echo(f"hint: {no_devices_hint(host_root, types)}", err=True)
