"""``--metrics-address`` for a command: start the probe server, or exit with one line."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kubeacc.cli.errors import fail
from kubeacc.metrics.http import Check, MetricsAddressError, ProbeServer


def start_probes(
    address: str | None,
    registry: CollectorRegistry,
    *,
    healthy: Check = list,
    ready: Check = list,
) -> ProbeServer | None:
    """Serve /metrics, /healthz, /readyz on ``address`` (None: not at all)."""
    if address is None:
        return None
    try:
        probes = ProbeServer(address, registry, healthy=healthy, ready=ready)
    except MetricsAddressError as err:
        fail(str(err))
    probes.start()
    return probes
