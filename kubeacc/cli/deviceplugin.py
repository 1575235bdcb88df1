"""``kubeacc device-plugin``: serve a node's accelerators through the kubelet device plugin API."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from kubeacc.agent.deviceplugin.config import (
    DevicePluginConfig,
    DevicePluginConfigError,
    load_config,
)
from kubeacc.agent.deviceplugin.manager import DevicePluginManager
from kubeacc.discovery import discover
from kubeacc.model import DeviceType

log = logging.getLogger("kubeacc.device-plugin")
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


def device_plugin_command(
    host_root: Annotated[Path, typer.Option(help="Root of the host's /sys, /dev, /proc.")] = Path(
        "/"
    ),
    plugin_dir: Annotated[
        Path, typer.Option(help="The kubelet's device-plugin directory (kubelet.sock).")
    ] = DEFAULT_PLUGIN_DIR,
    types: Annotated[
        list[DeviceType] | None,
        typer.Option("--type", "-t", help="Serve this type (repeatable; default: all)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="DevicePluginConfig YAML (per-type resources, sharing).")
    ] = None,
    interval: Annotated[
        float, typer.Option(help="Seconds between re-discoveries (hot-plug, health).")
    ] = 5.0,
    nvml: Annotated[str, typer.Option(help="Use NVML: auto, on or off.")] = "auto",
    cdi_dir: Annotated[
        Path, typer.Option(help="Where the CDI spec goes when the config enables CDI.")
    ] = Path("/var/run/cdi"),
) -> None:
    """Advertise accelerators to the kubelet as kubeacc.io/<type> and kubeacc.io/<type>-<model>."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        cfg = (
            load_config(config)
            if config
            else DevicePluginConfig.for_types(list(types or DeviceType))
        )
    except DevicePluginConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    if not host_root.is_dir():
        typer.echo(f"error: host root {host_root} is not a directory", err=True)
        raise typer.Exit(2)
    manager = DevicePluginManager(plugin_dir, cfg, cdi_dir, host_root)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    manager.start(discover(host_root, nvml=nvml))
    log.info("serving %s from %s", ", ".join(sorted(manager.servers)) or "nothing", plugin_dir)
    try:
        while not stop.wait(interval):
            manager.update(discover(host_root, nvml=nvml))
    finally:
        manager.stop()
