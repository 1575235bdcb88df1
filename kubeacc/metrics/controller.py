"""The controller's metrics: operations by phase and duration, reconcile passes and errors, leader.

Series (prefixed ``kubeacc_``):

* ``controller_operations{phase}``: AcceleratorOperations in each phase now (``New`` before the
  controller has looked at one), read from the watch cache at scrape time, on every replica.
* ``controller_operations_completed_total{action,phase}`` and
  ``controller_operation_duration_seconds{action,phase}``: operations this replica finished,
  and their time from start to Succeeded/Failed.
* ``controller_reconcile_passes_total``, ``controller_reconcile_seconds``,
  ``controller_reconcile_errors_total{scope}`` (``pass``, ``operation`` for one object,
  ``drain-rules`` for the rules of partitions and VFs that appear during a drain).
* ``controller_leader``: 1 while this replica holds the Lease.
* ``controller_devices_out_of_service{node,device,reason}``: 1 for each cordoned Accelerator;
  ``reason`` is its ``Remediation`` condition's reason while remediation holds it (``Draining``,
  ``Resetting``, ``HeldBack``, ``HandedToAdmin``, ...), else ``Cordoned`` (a person's cordon).
  Bounded by the devices out of service, read from the watch cache at scrape time.
* ``controller_device_taint_rules_total{step}``: drain DeviceTaintRules this replica created
  (``created``; a device's, its MIG partitions' and VFs' each count) and deleted (``deleted``).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kubeacc.crds.api import REMEDIATION_CONDITION as CONDITION_TYPE
from kubeacc.metrics.common import component_registry

#: Operations take from a second (a reset) to many minutes (a drain that waits for pods).
DURATION_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PHASES = ("New", "Pending", "Running", "Succeeded", "Failed")


def out_of_service_reason(acc: dict[str, Any]) -> str | None:
    """Why a cordoned Accelerator is out of service (None when it is not cordoned)."""
    if not (acc.get("spec") or {}).get("cordoned"):
        return None
    for c in (acc.get("status") or {}).get("conditions") or []:
        if c.get("type") == CONDITION_TYPE and c.get("status") == "True":
            return str(c.get("reason") or "Remediation")
    return "Cordoned"


class _StateCollector(Collector):
    def __init__(
        self,
        operations: Callable[[], list[dict[str, Any]]],
        leading: Callable[[], bool],
        accelerators: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.operations = operations
        self.leading = leading
        self.accelerators = accelerators

    def collect(self) -> Iterator[GaugeMetricFamily]:
        phases = Tally((op.get("status") or {}).get("phase") or "New" for op in self.operations())
        ops = GaugeMetricFamily(
            "kubeacc_controller_operations",
            "AcceleratorOperations by phase (from the controller's watch cache).",
            labels=["phase"],
        )
        for phase in sorted(set(PHASES) | set(phases)):
            ops.add_metric([phase], phases.get(phase, 0))
        yield ops
        yield GaugeMetricFamily(
            "kubeacc_controller_leader",
            "1 while this replica holds the controller Lease.",
            value=1 if self.leading() else 0,
        )
        out = GaugeMetricFamily(
            "kubeacc_controller_devices_out_of_service",
            "1 for each cordoned device, with why: the remediation step, or Cordoned.",
            labels=["node", "device", "reason"],
        )
        for acc in self.accelerators():
            reason = out_of_service_reason(acc)
            if reason is not None:
                spec = acc.get("spec") or {}
                out.add_metric([spec.get("node", ""), spec.get("deviceName", ""), reason], 1)
        yield out


class ControllerMetrics:
    def __init__(
        self,
        operations: Callable[[], list[dict[str, Any]]],
        leading: Callable[[], bool],
        accelerators: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        self.registry = r = component_registry("controller")
        r.register(_StateCollector(operations, leading, accelerators))
        self.passes = Counter(
            "kubeacc_controller_reconcile_passes_total", "Reconcile passes run.", registry=r
        )
        self.pass_seconds = Histogram(
            "kubeacc_controller_reconcile_seconds",
            "Duration of one reconcile pass.",
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "kubeacc_controller_reconcile_errors_total",
            "Reconcile failures: a whole pass, or one operation object.",
            ["scope"],
            registry=r,
        )
        self.completed = Counter(
            "kubeacc_controller_operations_completed_total",
            "Operations this replica moved to Succeeded or Failed.",
            ["action", "phase"],
            registry=r,
        )
        self.taint_rules = Counter(
            "kubeacc_controller_device_taint_rules_total",
            "Drain DeviceTaintRules created and deleted (a device's, its partitions' and VFs').",
            ["step"],
            registry=r,
        )
        for step in ("created", "deleted"):
            self.taint_rules.labels(step)  # 0 from the start, not absent
        self.duration = Histogram(
            "kubeacc_controller_operation_duration_seconds",
            "Operations from start to Succeeded/Failed.",
            ["action", "phase"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
