"""Prometheus metrics and the /metrics, /healthz, /readyz endpoint of each long-running component.

Each component keeps its metrics in its own :class:`prometheus_client.CollectorRegistry` (not the
library's global one), so several agents or controllers in one process (tests) never collide.
"""
