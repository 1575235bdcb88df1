"""The node agent's metrics: devices, claims prepared, slices published, kubelet registrations.

Series (all prefixed ``kubeacc_``; docs/install.md lists them with their meaning):

* ``agent_devices{type,model,health}``: what the last discovery found.
* ``agent_prepare_seconds`` / ``agent_unprepare_seconds``: histograms of NodePrepareResources /
  NodeUnprepareResources calls; ``agent_prepare_errors_total`` / ``agent_unprepare_errors_total``
  count the claims that got an error; ``agent_prepared_claims`` is the checkpoint's size;
  ``agent_shares{enforcement}`` its shares by what enforces them (library, mps, advisory).
* ``agent_slice_publishes_total``, ``agent_publish_errors_total``, ``agent_resource_slices``,
  ``agent_published_devices``: the node's ResourceSlice pool.
* ``agent_kubelet_registrations_total{plugin}``: the kubelet accepted a plugin (``dra``, or a
  device-plugin resource name).
* ``agent_health_taints{effect}``, ``agent_health_taint_steps_total{step,effect}``,
  ``agent_health_taint_damped_total``: device health as slice taints (kubeacc.agent.healthtaints).
* ``agent_health_streams_total{version}``: DRAResourceHealth streams the kubelet opened, by the
  API version it chose (``v1`` from 1.37, ``v1alpha1`` before).
* ``agent_fpga_bindings_total{outcome,reason}``: FPGA binding conditions written (outcome
  ``programmed`` or ``failed``, reason as in the condition; kubeacc.agent.dra.fpga.binding).
* ``deviceplugin_allocations_total{resource}``, ``deviceplugin_allocation_errors_total``.
"""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubeacc.metrics.common import component_registry
from kubeacc.model import Inventory

#: Prepare is a few milliseconds (p99 target 5 ms) unless the API server or an FPGA is slow.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class DevicePluginMetrics:
    """Device-plugin series; on the agent's registry or the ``device-plugin`` command's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.allocations = Counter(
            "kubeacc_deviceplugin_allocations_total",
            "Container allocations answered by the device plugin.",
            ["resource"],
            registry=registry,
        )
        self.allocation_errors = Counter(
            "kubeacc_deviceplugin_allocation_errors_total",
            "Allocate requests refused (unknown or unhealthy device IDs).",
            ["resource"],
            registry=registry,
        )
        self.registrations = Counter(
            "kubeacc_agent_kubelet_registrations_total",
            "Times the kubelet accepted one of the agent's plugins.",
            ["plugin"],
            registry=registry,
        )
        self.registration_failures = Counter(
            "kubeacc_agent_kubelet_registration_failures_total",
            "Registrations the kubelet refused or that could not reach it.",
            ["plugin"],
            registry=registry,
        )

    @classmethod
    def standalone(cls) -> DevicePluginMetrics:
        return cls(component_registry("device-plugin"))


class AgentMetrics(DevicePluginMetrics):
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__(registry or component_registry("agent"))
        r = self.registry
        self.devices = Gauge(
            "kubeacc_agent_devices",
            "Devices found by the last discovery.",
            ["type", "model", "health"],
            registry=r,
        )
        self.prepare_seconds = Histogram(
            "kubeacc_agent_prepare_seconds",
            "NodePrepareResources calls: claim read, CDI spec and checkpoint written.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.unprepare_seconds = Histogram(
            "kubeacc_agent_unprepare_seconds",
            "NodeUnprepareResources calls.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prepare_errors = Counter(
            "kubeacc_agent_prepare_errors_total",
            "Claims whose preparation failed (the error went back to the kubelet).",
            registry=r,
        )
        self.unprepare_errors = Counter(
            "kubeacc_agent_unprepare_errors_total",
            "Claims whose unpreparation failed.",
            registry=r,
        )
        self.claims_swept = Counter(
            "kubeacc_agent_claims_swept_total",
            "Prepared claims the agent unprepared itself, found gone or deallocated on the API "
            "server (at start: an unprepare a power loss dropped; later: one the kubelet missed).",
            registry=r,
        )
        self.prepared_claims = Gauge(
            "kubeacc_agent_prepared_claims", "Claims prepared on this node now.", registry=r
        )
        self.shares = Gauge(
            "kubeacc_agent_shares",
            "GPU shares prepared on this node now, by how their limits are enforced "
            "(library, mps, advisory).",
            ["enforcement"],
            registry=r,
        )
        self.slice_publishes = Counter(
            "kubeacc_agent_slice_publishes_total",
            "Times the node's ResourceSlices were written.",
            registry=r,
        )
        self.publish_errors = Counter(
            "kubeacc_agent_publish_errors_total",
            "Failed attempts to publish ResourceSlices (API server away, refused).",
            registry=r,
        )
        self.resource_slices = Gauge(
            "kubeacc_agent_resource_slices", "ResourceSlices in the node's pool.", registry=r
        )
        self.published_devices = Gauge(
            "kubeacc_agent_published_devices", "Devices published for DRA.", registry=r
        )
        self.discovery_failures = Counter(
            "kubeacc_agent_discovery_failures_total",
            "Discovery passes the machine failed (descriptors, I/O, deadline); the last good "
            "inventory stood.",
            registry=r,
        )
        self.loop_restarts = Counter(
            "kubeacc_agent_loop_restarts_total",
            "Times a loop of the agent stopped on an unexpected error and was restarted.",
            ["loop"],
            registry=r,
        )
        self.loop_restarts.labels("agent")  # a series from the start: 0, not absent
        self.health_taints = Gauge(
            "kubeacc_agent_health_taints",
            "Devices carrying a health taint now, by effect (None, NoSchedule, NoExecute).",
            ["effect"],
            registry=r,
        )
        for effect in ("None", "NoSchedule", "NoExecute"):
            self.health_taints.labels(effect)  # 0 from the start, not absent
        self.health_taint_steps = Counter(
            "kubeacc_agent_health_taint_steps_total",
            "Health taints added, raised to a stronger effect and lifted, by effect.",
            ["step", "effect"],
            registry=r,
        )
        self.health_taint_damped = Counter(
            "kubeacc_agent_health_taint_damped_total",
            "Health taints held longer because the device faulted again soon after a lift.",
            registry=r,
        )

        self.fpga_bindings = Counter(
            "kubeacc_agent_fpga_bindings_total",
            "FPGA binding conditions written before binding, by outcome (programmed, failed) "
            "and reason (Programmed, NoBitstream, BitstreamNotAllowed, ProgrammingTimedOut, ...).",
            ["outcome", "reason"],
            registry=r,
        )
        self.health_streams = Counter(
            "kubeacc_agent_health_streams_total",
            "DRAResourceHealth streams the kubelet opened, by API version (v1, v1alpha1).",
            ["version"],
            registry=r,
        )

    def observe_inventory(self, inventory: Inventory) -> None:
        counts = Tally(
            (d.type.value, d.model or "unknown", d.health.state.value) for d in inventory.devices
        )
        self.devices.clear()
        for (kind, model, health), n in counts.items():
            self.devices.labels(kind, model, health).set(n)
