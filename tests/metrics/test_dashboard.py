"""The Grafana dashboard asks only for series the components really export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from kubeacc.agent.telemetry.collector import Snapshot, TelemetryCollector
from kubeacc.agent.telemetry.series import FAMILIES, PREFIX, Reading
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.metrics.controller import ControllerMetrics
from kubeacc.metrics.lifecycle import LifecycleMetrics

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "kubeacc-dashboard.json"


def _names(registry: CollectorRegistry) -> set[str]:
    samples = {s.name for family in registry.collect() for s in family.samples}
    return {n for n in samples if not n.endswith("_created")}


def test_every_panel_queries_exported_series() -> None:
    dash = json.loads(DASHBOARD.read_text())
    agent = AgentMetrics()
    agent.devices.labels("gpu", "H100", "Healthy").set(1)
    for counter in (agent.allocations, agent.allocation_errors):
        counter.labels("kubeacc.io/gpu").inc()
    for counter in (agent.registrations, agent.registration_failures):
        counter.labels("dra").inc()
    agent.health_taint_steps.labels("added", "NoExecute").inc()
    held = {
        "spec": {"node": "n1", "deviceName": "gpu-a", "cordoned": True},
        "status": {"conditions": [{"type": "Remediation", "status": "True", "reason": "HeldBack"}]},
    }
    by_hand = {"spec": {"node": "n1", "deviceName": "gpu-b", "cordoned": True}}
    idle = {"spec": {"node": "n1", "deviceName": "gpu-c"}}
    controller = ControllerMetrics(lambda: [], lambda: True, lambda: [held, by_hand, idle])
    out = {
        (s.labels["device"], s.labels["reason"])
        for m in controller.registry.collect()
        if m.name == "kubeacc_controller_devices_out_of_service"
        for s in m.samples
    }
    assert out == {("gpu-a", "HeldBack"), ("gpu-b", "Cordoned")}
    controller.errors.labels("pass").inc()
    controller.completed.labels("Reset", "Succeeded").inc()
    controller.duration.labels("Reset", "Succeeded").observe(1)
    lifecycle = LifecycleMetrics()
    lifecycle.actions.labels("Reset", "Succeeded").inc()
    lifecycle.action_seconds.labels("Reset").observe(1)
    exported = _names(agent.registry) | _names(controller.registry) | _names(lifecycle.registry)
    device = _device_series()
    exported |= device

    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 14
    used = {n for e in exprs for n in re.findall(r"\b(?:kubeacc|process)_[a-z_]+\b", e)}
    assert used - exported == set()
    # every agent and controller family shows up somewhere
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exported}
    shown = {re.sub(r"_(bucket|count|sum)$", "", n) for n in used}
    assert {f for f in families if f.startswith("kubeacc_") and f not in device} - shown == set()
    # the device panels: utilisation, memory by namespace, errors, out of service and why
    assert {
        f"{PREFIX}{n}"
        for n in (
            "utilization_ratio",
            "memory_used_bytes",
            "xid_errors_total",
            "ecc_errors_total",
            "up",
            "last_xid",
        )
    } <= used


def _device_series() -> set[str]:
    """Every device telemetry series, from the agent's collector given one reading of each."""
    readings = [
        Reading(name, "gpu-0", 1.0, tuple("x" for _ in fam.labels))
        for name, fam in FAMILIES.items()
    ]
    registry = CollectorRegistry()
    registry.register(TelemetryCollector("n", lambda: Snapshot(readings, {}, {})))
    return _names(registry)
