"""The Prometheus collector of the last telemetry sample (kubeacc.agent.telemetry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kubeacc.agent.telemetry.holders import NOBODY, Holders
from kubeacc.agent.telemetry.series import FAMILIES, PREFIX, Kind, Reading

BASE_LABELS = ("node", "device", "model", "namespace", "pod", "container", "claim")


class Snapshot:
    """One sample: its readings, the device models and who held each device."""

    def __init__(
        self,
        readings: list[Reading],
        models: dict[str, str],
        holders: Holders,
    ) -> None:
        self.readings = readings
        self.models = models
        self.holders = holders


class TelemetryCollector:
    """Yields the families of :data:`~kubeacc.agent.telemetry.series.FAMILIES` from the
    snapshot ``current()`` returns: per reading one series per holder of its device (one with
    empty holder labels for a device nobody holds)."""

    def __init__(self, node: str, current: Callable[[], Snapshot | None]) -> None:
        self.node = node
        self.current = current

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families depend on the node's devices: nothing fixed to declare

    def collect(self) -> Iterator[Metric]:
        snap = self.current()
        if snap is None:
            return
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for r in snap.readings:
            spec = FAMILIES[r.metric]
            fam = families.get(r.metric)
            if fam is None:
                cls = CounterMetricFamily if spec.kind == Kind.COUNTER else GaugeMetricFamily
                fam = families[r.metric] = cls(
                    PREFIX + r.metric, spec.help, labels=(*BASE_LABELS, *spec.labels)
                )
            model = snap.models.get(r.device, "unknown")
            for h in snap.holders.get(r.device) or [NOBODY]:
                fam.add_metric(
                    [
                        self.node,
                        r.device,
                        model,
                        h.namespace,
                        h.pod,
                        h.container,
                        h.claim,
                        *r.labels,
                    ],
                    r.value,
                )
        yield from families.values()
