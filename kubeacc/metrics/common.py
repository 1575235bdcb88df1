"""What every component's registry carries: build info and the process's own resources."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector

from kubeacc import __version__


def component_registry(component: str) -> CollectorRegistry:
    """A fresh registry with ``kubeacc_build_info`` and the ``process_*`` series."""
    registry = CollectorRegistry(auto_describe=True)
    Gauge(
        "kubeacc_build_info",
        "kube-acc version and component of this process (always 1).",
        ["version", "component"],
        registry=registry,
    ).labels(__version__, component).set(1)
    ProcessCollector(registry=registry)
    return registry
