"""All device-plugin resources of a node: start, update, and re-register after kubelet restarts.

The kubelet announces a restart by recreating ``kubelet.sock`` (and deleting every plugin
socket in its directory). A watcher polls the socket's identity every 50 ms; when it changes,
or one of our sockets is gone, every server is restarted on a fresh socket and registered
again, well within the one-second target.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubeacc.deviceplugin.allocation import AllocationError
from kubeacc.deviceplugin.cdi import CDI_KIND, DRIVER_DEVICE, build_spec, write_spec
from kubeacc.deviceplugin.config import DevicePluginConfig, resource_names
from kubeacc.deviceplugin.server import RegistrationError, ResourceServer, ResourceState
from kubeacc.deviceplugin.shared import (
    CORES_RESOURCE,
    MEMORY_RESOURCE,
    UNITS_RESOURCE,
    DecisionLookup,
    Kind,
    id_gpus,
)
from kubeacc.model import Device, DeviceType, Inventory
from kubeacc.node.sharelimit import Limiter
from kubeacc.node.supervise import supervised
from kubeacc.node.userspace.nvidia import DriverRootError
from kubeacc.node.userspace.provider import DriverUserSpace, UserSpaceMode

if TYPE_CHECKING:  # prometheus_client: only where the series are served (kubeacc.cli.probes)
    from kubeacc.metrics.agent import DevicePluginMetrics

log = logging.getLogger(__name__)

KUBELET_SOCKET = "kubelet.sock"
POLL_SECONDS = 0.05
#: While the kubelet socket is missing, the warning is repeated this often.
MISSING_WARNING_SECONDS = 60.0


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


class DevicePluginManager:
    def __init__(
        self,
        plugin_dir: Path,
        config: DevicePluginConfig,
        cdi_dir: Path | None = None,
        device_root: Path = Path("/"),
        metrics: DevicePluginMetrics | None = None,
        decisions: DecisionLookup | None = None,
        limiter: Limiter | None = None,
        user_space: DriverUserSpace | None = None,
    ):
        self.metrics = metrics
        #: The NVIDIA driver's user space: one more CDI device of the spec (DRIVER_DEVICE).
        self.user_space = user_space
        #: Why the spec has no DRIVER_DEVICE ("" when it has, or needs none).
        self._driver_error = ""
        #: Enforces kubeacc.io/gpu-memory shares in their containers.
        self.limiter = limiter
        #: Where shared resources learn the extender's decisions (None: Allocate refuses them).
        self.decisions = decisions
        self.plugin_dir = plugin_dir
        self.config = config
        self.cdi_dir = cdi_dir if config.cdi else None
        self.cdi_kind = CDI_KIND if self.cdi_dir is not None else None
        self.device_root = device_root
        self.kubelet_socket = plugin_dir / KUBELET_SOCKET
        self.servers: dict[str, ResourceServer] = {}
        self.registrations = 0
        self.last_registration: float | None = None
        #: Resources the kubelet accepted since it last started (readiness).
        self.registered: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._kubelet: tuple[int, int] | None = None

    # -- what to serve --------------------------------------------------------------------

    def states(self, inv: Inventory) -> dict[str, ResourceState]:
        """Resource name -> its devices, for every type the config serves."""
        grouped: dict[str, dict[str, Device]] = {}
        settings: dict[str, tuple[int, str, str, bool]] = {}
        for dev in inv.devices:
            cfg = self.config.types.get(dev.type)
            if cfg is None or dev.pci is None:
                continue
            shared = [(MEMORY_RESOURCE, Kind.MEMORY), (CORES_RESOURCE, Kind.CORES)]
            if cfg.units:
                shared.append((UNITS_RESOURCE, Kind.UNITS))
            names = [(n, Kind.WHOLE) for n in resource_names(dev, cfg)]
            for name, kind in [*names, *shared] if cfg.shared else names:
                grouped.setdefault(name, {})[dev.pci.bus_id] = dev
                settings[name] = (
                    cfg.replicas,
                    cfg.strategy.value,
                    kind.value if cfg.shared else "",
                    cfg.enforce,
                )
        numa = {n.id: list(n.distances) for n in inv.numa_nodes}
        return {name: ResourceState(devs, numa, *settings[name]) for name, devs in grouped.items()}

    def shared_id_devices(self, inv: Inventory) -> dict[tuple[str, str], str]:
        """(shared resource, ID key) -> the name of the GPU its unit IDs stand for."""
        out: dict[tuple[str, str], str] = {}
        for name, state in self.states(inv).items():
            if state.shared:
                ordered = [d for _, d in sorted(state.devices.items())]
                for key, dev in id_gpus(Kind(state.shared), ordered).items():
                    out[(name, key)] = dev.name
        return out

    def share_enforcement(self, inv: Inventory) -> dict[tuple[str, str], str]:
        """(kubeacc.io/gpu-memory, GPU name) -> how a memory share of it is enforced."""
        gpu = self.config.types.get(DeviceType.GPU)
        if gpu is None or not gpu.shared:
            return {}
        limiter = self.limiter or Limiter()
        return {
            (MEMORY_RESOURCE, d.name): limiter.enforcement(d.vendor, False, gpu.enforce).value
            for d in inv.by_type(DeviceType.GPU)
        }

    # -- life cycle -----------------------------------------------------------------------

    def start(self, inv: Inventory) -> None:
        self.update(inv)
        if not self.kubelet_socket.exists():
            self._warn_missing(0.0)
        self._watcher = supervised("dp-watch", self._watch, self._stop)

    def _add_user_space(self, spec: dict[str, Any]) -> None:
        """The CDI device that brings the NVIDIA driver's user space, when it is found."""
        previous, self._driver_error = self._driver_error, ""
        if self.user_space is None:
            return
        try:
            edits = self.user_space.nvidia_edits()
        except DriverRootError as exc:
            if previous != str(exc):
                log.error("NVIDIA driver user space: %s", exc)
            self._driver_error = str(exc)
            return
        if edits:
            spec["devices"].append({"name": DRIVER_DEVICE, "containerEdits": edits})

    def _driver_devices(self) -> list[str]:
        """What an NVIDIA GPU's container gets beside its GPUs (Allocate)."""
        if self._driver_error:
            raise AllocationError(f"NVIDIA driver user space: {self._driver_error}")
        if self.user_space is None or self.user_space.mode is UserSpaceMode.TOOLKIT:
            return []
        return [f"{CDI_KIND}={DRIVER_DEVICE}"]

    def update(self, inv: Inventory) -> None:
        """New discovery result: stream changed lists; serve resources that appeared.

        A resource whose devices all vanished keeps serving an empty list, so the kubelet
        drops its capacity to zero instead of keeping stale devices.
        """
        states = self.states(inv)
        if self.cdi_dir is not None:
            served = {d.name: d for st in states.values() for d in st.devices.values()}
            spec = build_spec(served.values(), self.device_root)
            if any(d.type is DeviceType.GPU and d.vendor == "NVIDIA" for d in served.values()):
                self._add_user_space(spec)
            write_spec(self.cdi_dir, spec)
        with self._lock:
            for name, state in states.items():
                server = self.servers.get(name)
                if server is None:
                    server = ResourceServer(
                        name,
                        self.plugin_dir,
                        state,
                        self.cdi_kind,
                        self.metrics,
                        device_root=self.device_root,
                        decisions=self.decisions,
                        limiter=self.limiter,
                        driver_devices=self._driver_devices,
                    )
                    self.servers[name] = server
                    self._serve(server)
                else:
                    server.update(state)
            for name, server in self.servers.items():
                if name not in states:
                    server.update(
                        ResourceState({}, {}, server.state.replicas, "spread", server.state.shared)
                    )

    def _serve(self, server: ResourceServer) -> None:
        server.start()
        self.registered.discard(server.resource)
        if self.kubelet_socket.exists():
            try:
                server.register(self.kubelet_socket)
                self.registrations += 1
                self.last_registration = time.time()
                self.registered.add(server.resource)
                if self.metrics is not None:
                    self.metrics.registrations.labels(server.resource).inc()
            except RegistrationError as err:
                log.warning("kubelet refused %s: %s", server.resource, err)
                if self.metrics is not None:
                    self.metrics.registration_failures.labels(server.resource).inc()

    def unregistered(self) -> list[str]:
        """Resources served but not (yet, or no longer) registered with the kubelet."""
        with self._lock:
            return sorted(set(self.servers) - self.registered)

    def _warn_missing(self, waited: float) -> None:
        log.warning(
            "no kubelet socket %s%s: nothing registered; retrying until it appears "
            "(is this the kubelet's device-plugins directory, is the kubelet running?)",
            self.kubelet_socket,
            f" after {waited:.0f} s" if waited else "",
        )

    def _watch(self) -> None:
        self._kubelet = _identity(self.kubelet_socket)
        missing_since = time.monotonic()
        warned = missing_since
        while not self._stop.wait(POLL_SECONDS):
            current = _identity(self.kubelet_socket)
            with self._lock:
                lost = [s for s in self.servers.values() if not s.serving()]
                if current is not None and current != self._kubelet:
                    log.info(
                        "kubelet socket %s: registering %d resources",
                        "recreated" if self.registrations else "appeared",
                        len(self.servers),
                    )
                    lost = list(self.servers.values())
                self._kubelet = current
                if current is None:
                    now_ = time.monotonic()
                    if now_ - warned >= MISSING_WARNING_SECONDS:
                        self._warn_missing(now_ - missing_since)
                        warned = now_
                    continue
                missing_since = warned = time.monotonic()
                for server in lost:
                    self._serve(server)

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(2)
        with self._lock:
            for server in self.servers.values():
                server.stop()
