"""The Grafana dashboard asks only for series the components really export."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

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
    controller = ControllerMetrics(lambda: [], lambda: True)
    controller.errors.labels("pass").inc()
    controller.completed.labels("Reset", "Succeeded").inc()
    controller.duration.labels("Reset", "Succeeded").observe(1)
    lifecycle = LifecycleMetrics()
    lifecycle.actions.labels("Reset", "Succeeded").inc()
    lifecycle.action_seconds.labels("Reset").observe(1)
    exported = _names(agent.registry) | _names(controller.registry) | _names(lifecycle.registry)

    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 14
    used = {n for e in exprs for n in re.findall(r"\b(?:kubeacc|process)_[a-z_]+\b", e)}
    assert used - exported == set()
    # every agent and controller family shows up somewhere
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in exported}
    shown = {re.sub(r"_(bucket|count|sum)$", "", n) for n in used}
    assert {f for f in families if f.startswith("kubeacc_")} - shown == set()
