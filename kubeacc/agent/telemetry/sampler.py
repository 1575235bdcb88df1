"""The telemetry sampler: one background thread reading every device on an interval.

Each pass reads the devices of the agent's current inventory (NVIDIA through
:class:`~.nvidia.NvidiaReader`, the rest through :class:`~.sysfs.SysfsReader`), asks who holds
each device, and swaps in a new :class:`~.collector.Snapshot` that scrapes serve as they are.
The cost is one pass per interval whatever the scrape rate; the series are bounded by the
node's devices (and MIG instances) times their holders.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubeacc.agent.telemetry.collector import Snapshot, TelemetryCollector
from kubeacc.agent.telemetry.faults import DeviceFault, FaultDetector
from kubeacc.agent.telemetry.holders import Holders
from kubeacc.agent.telemetry.nvidia import NvidiaReader
from kubeacc.agent.telemetry.series import Reading
from kubeacc.agent.telemetry.sysfs import SysfsReader
from kubeacc.host import Host
from kubeacc.model import Inventory
from kubeacc.node.supervise import supervised

log = logging.getLogger(__name__)

#: Seconds between samples unless configured (``--telemetry-interval``).
DEFAULT_INTERVAL_S = 10.0
#: Deadline of one pass over the node's files.
FILES_DEADLINE_S = 5.0


class TelemetrySampler:
    def __init__(
        self,
        node: str,
        host: Host,
        nvml: Callable[[], Any | None],
        inventory: Callable[[], Inventory],
        holders: Callable[[], Holders],
        interval: float = DEFAULT_INTERVAL_S,
        on_faults: Callable[[list[DeviceFault]], None] | None = None,
        health_thresholds: Callable[[], frozenset[int]] = frozenset,
        on_pass: Callable[[list[DeviceFault], list[Reading]], None] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("the telemetry interval must be positive (0 turns telemetry off)")
        self.node = node
        self.host = host
        self.inventory = inventory
        self.holders = holders
        self.interval = interval
        self.nvidia = NvidiaReader(nvml)
        self.sysfs = SysfsReader()
        self.collector = TelemetryCollector(node, self.snapshot)
        #: Faults that appeared since the previous pass go to ``on_faults`` (called at every
        #: pass, with an empty list when nothing new appeared).
        self.faults = FaultDetector()
        self.on_faults = on_faults
        #: The ``failures`` counts of the policies' HealthFailing rules (kubeacc.crds.remediation).
        self.health_thresholds = health_thresholds
        #: Every pass's new faults with its readings (the health taints need both).
        self.on_pass = on_pass
        self.passes = 0
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Holders of the last pass, kept when the kubelet cannot be asked for a moment.
        self._holders: Holders = {}

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    def sample_once(self) -> Snapshot:
        inv = self.inventory()
        readings = self.nvidia.read(inv.devices)
        readings += self.sysfs.read(self.host.files(deadline=FILES_DEADLINE_S), inv.devices)
        faults = self.faults.update(readings)
        unhealthy = {d.name: d.health.reason for d in inv.devices if not d.health.healthy}
        faults += self.faults.health(unhealthy, self._thresholds())
        if self.on_faults is not None:  # every pass: a report that failed is tried again
            try:
                self.on_faults(faults)
            except Exception as exc:  # an API server away must not stop the sampling
                log.warning("reporting device faults failed: %s", exc)
        if self.on_pass is not None:
            try:
                self.on_pass(faults, readings)
            except Exception as exc:  # the sampling goes on; the next pass tries again
                log.warning("device health after a telemetry pass failed: %s", exc)
        models = {}
        for d in inv.devices:
            models[d.name] = d.model or "unknown"
            for p in d.partitions:
                models[p.name] = f"{d.model} {p.profile}" if p.profile else d.model
        try:
            self._holders = self.holders()
        except Exception as exc:  # kubelet away: the last known holders stand
            log.debug("telemetry: holders unknown this pass (%s)", exc)
        snap = Snapshot(readings, models, self._holders)
        with self._lock:
            self._snapshot = snap
        self.passes += 1
        return snap

    def _thresholds(self) -> frozenset[int]:
        try:
            return self.health_thresholds()
        except Exception as exc:  # policies unknown this pass (watch not synced): none
            log.debug("telemetry: health-failing thresholds unknown (%s)", exc)
            return frozenset()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread = supervised("telemetry", self._loop, self._stop)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self.nvidia.close()
