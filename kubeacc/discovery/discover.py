"""Discovery: run every backend over one host root and build the node's Inventory."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kubeacc.discovery.backends.admin import AdminBackend
from kubeacc.discovery.backends.base import Backend
from kubeacc.discovery.backends.drm_gpu import DrmGpuBackend
from kubeacc.discovery.backends.fpga import FpgaBackend
from kubeacc.discovery.backends.generic import GenericAcceleratorBackend
from kubeacc.discovery.backends.nic import NicBackend
from kubeacc.discovery.backends.nvidia import NvidiaBackend
from kubeacc.discovery.backends.xpu import KunlunBackend
from kubeacc.discovery.context import DiscoveryContext
from kubeacc.discovery.numa import read_numa
from kubeacc.discovery.pci import scan
from kubeacc.discovery.pciids import PciIds
from kubeacc.host.files import HostReadError, HostRoot, WarningSink
from kubeacc.host.interface import Host
from kubeacc.model import Device, DeviceType, Inventory

if TYPE_CHECKING:
    from kubeacc.discovery.backends.adminconfig import DiscoveryConfig

log = logging.getLogger(__name__)

#: Seconds one discovery pass may take before it stops reading the host (a large node takes
#: well under 0.1 s; see docs/discovery.md).
DEADLINE = 10.0


def default_backends(config: DiscoveryConfig | None = None, nvml: str = "auto") -> list[Backend]:
    """Most specific first: admin entries, vendor backends, then the generic catch-alls."""
    backends: list[Backend] = []
    if config is not None and config.devices:
        backends.append(AdminBackend(config))
    backends += [
        NvidiaBackend(nvml),
        DrmGpuBackend(),
        FpgaBackend(),
        KunlunBackend(),
        NicBackend(),
        GenericAcceleratorBackend(),
    ]
    return backends


def _hostname(host: HostRoot) -> str | None:
    for path in ("/etc/hostname", "/proc/sys/kernel/hostname"):
        name = host.read_text(path, required=False)
        if name:
            return name.splitlines()[0].strip() or None
    return os.uname().nodename if host.root == "/" else None


def _number(devices: Iterable[Device]) -> list[Device]:
    """Order by type then PCI address; index counts within a type."""
    ordered = sorted(devices, key=lambda d: (d.type.value, d.pci_bus_id or d.name))
    counters: dict[DeviceType, int] = {}
    for dev in ordered:
        dev.index = counters.get(dev.type, 0)
        counters[dev.type] = dev.index + 1
    return ordered


def discover(
    node: Host,
    *,
    config: DiscoveryConfig | None = None,
    nvml: str = "auto",
    types: Sequence[DeviceType] | None = None,
    backends: Sequence[Backend] | None = None,
    deadline: float | None = DEADLINE,
    strict: bool = False,
) -> Inventory:
    """Everything on the host ``node``. Never raises for bad host data: what can't
    be read becomes a warning naming the device and the path. After ``deadline`` seconds the
    pass stops reading and says so in a warning (None: no deadline).

    ``strict`` (the agents): a pass the machine failed (a read refused for lack of
    descriptors or memory, an I/O error, the deadline, a backend that raised) raises
    :class:`HostReadError` instead of answering fewer devices than the host has, so that the
    caller keeps its last good inventory rather than withdraw devices that are still there.
    """
    sink = WarningSink()
    host = node.files(sink, deadline)
    ctx = DiscoveryContext(host=host, functions=scan(host), names=PciIds.load(host), node=node)
    found: list[Device] = []
    for backend in backends if backends is not None else default_backends(config, nvml):
        if host.expired():
            break
        try:
            found += backend.discover(ctx)
        except Exception as err:
            log.debug("backend %s failed", backend.name, exc_info=True)
            sink.fail(f"backend:{backend.name}", f"backend failed: {type(err).__name__}: {err}")
    if types:
        found = [d for d in found if d.type in types]
    if host.expired():
        log.warning("discovery of %s stopped at its %g s deadline", host.root, deadline)
    if strict and sink.failures:
        more = f" (and {len(sink.failures) - 1} more)" if len(sink.failures) > 1 else ""
        raise HostReadError(f"discovery of {host.root} failed: {sink.failures[0]}{more}")
    return Inventory(
        hostname=_hostname(host),
        devices=_number(found),
        numa_nodes=read_numa(host),
        warnings=sink.items,
    )
