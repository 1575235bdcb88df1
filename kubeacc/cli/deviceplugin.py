"""``kubeacc device-plugin``: serve a node's accelerators through the kubelet device plugin API."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from kubeacc.cli.declare import option
from kubeacc.cli.errors import fail
from kubeacc.cli.hosts import HostKind, HostKindOption, check_host_root, open_host
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.options import DeviceRootOption, HostRootOption, MetricsAddressOption
from kubeacc.cli.signals import stop_on_signals
from kubeacc.deviceplugin.config import (
    DevicePluginConfig,
    DevicePluginConfigError,
    load_config,
)
from kubeacc.deviceplugin.manager import DevicePluginManager
from kubeacc.discovery import discover
from kubeacc.gcfreeze import freeze_startup
from kubeacc.host.files import HostReadError
from kubeacc.model import DeviceType

if TYPE_CHECKING:
    from kubeacc.metrics.agent import DevicePluginMetrics
    from kubeacc.metrics.http import ProbeServer

log = logging.getLogger("kubeacc.device-plugin")
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


def device_plugin_command(
    host_root: HostRootOption = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    device_root: DeviceRootOption = Path("/"),
    plugin_dir: Annotated[
        Path, option(help="The kubelet's device-plugin directory (kubelet.sock).")
    ] = DEFAULT_PLUGIN_DIR,
    types: Annotated[
        list[DeviceType] | None,
        option("--type", "-t", help="Serve this type (repeatable; default: all)."),
    ] = None,
    config: Annotated[
        Path | None, option(help="DevicePluginConfig YAML (per-type resources, sharing).")
    ] = None,
    interval: Annotated[
        float, option(min=0.05, help="Seconds between re-discoveries (hot-plug, health).")
    ] = 5.0,
    nvml: Annotated[str, option(help="Use NVML: auto, on or off.")] = "auto",
    cdi_dir: Annotated[
        Path, option(help="Where the CDI spec goes when the config enables CDI.")
    ] = Path("/var/run/cdi"),
    log_level: LogLevelOption = LogLevel.INFO,
    metrics_address: MetricsAddressOption = None,
) -> None:
    """Advertise accelerators to the kubelet as kubeacc.io/<type> and kubeacc.io/<type>-<model>."""
    if nvml not in ("auto", "on", "off"):
        fail(f"--nvml must be auto, on or off, not {nvml!r}")
    try:
        cfg = (
            load_config(config)
            if config
            else DevicePluginConfig.for_types(list(types or DeviceType))
        )
    except DevicePluginConfigError as err:
        fail(str(err))
    shared = sorted(t.value for t, c in cfg.types.items() if c.shared)
    if shared:
        fail(
            f"{config}: shared {', '.join(shared)} needs the API server to read kubeacc "
            "extender's decisions: serve it with `kubeacc agent --device-plugin-config`"
        )
    check_host_root(host_root)
    if not plugin_dir.is_dir():
        fail(
            f"plugin dir {plugin_dir} is not a directory (the kubelet's <root-dir>/device-plugins)"
        )
    setup_logging(log_level)
    host = open_host(host_root, host_kind)
    # The series are kept only where --metrics-address serves them: without it no one could
    # read them, and prometheus_client with the probe server is ~60 modules the kubelet's
    # Register call would wait for (issue 30).
    metrics: DevicePluginMetrics | None = None
    probes: ProbeServer | None = None
    if metrics_address is not None:
        from kubeacc.cli.probes import start_probes
        from kubeacc.metrics.agent import DevicePluginMetrics

        metrics = DevicePluginMetrics.standalone()
    manager = DevicePluginManager(plugin_dir, cfg, cdi_dir, device_root, metrics)
    if metrics is not None:
        probes = start_probes(
            metrics_address,
            metrics.registry,
            ready=lambda: [f"{r} not registered with the kubelet" for r in manager.unregistered()],
        )
    stop = stop_on_signals()
    manager.start(discover(host, nvml=nvml, strict=True))
    served = ", ".join(sorted(manager.servers)) or "no resources (no matching devices found)"
    if manager.kubelet_socket.exists():
        log.info("serving %s; registered with the kubelet at %s", served, manager.kubelet_socket)
    else:
        log.info("serving %s; not registered yet (no kubelet socket)", served)
    freeze_startup("device plugin")
    try:
        while not stop.wait(interval):
            try:  # strict: a pass the machine failed keeps the devices served as they are
                manager.update(discover(host, nvml=nvml, strict=True))
            except HostReadError as err:
                log.warning("%s; serving the last good inventory", err)
    finally:
        manager.stop()
        if probes is not None:
            probes.stop()
