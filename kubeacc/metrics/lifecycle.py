"""The life-cycle agent's metrics: hardware actions run on this node.

* ``lifecycle_actions_total{action,result}``: targets this node ran (``Succeeded``/``Failed``);
* ``lifecycle_action_seconds{action}``: how long each action took on the node;
* ``lifecycle_pass_errors_total``: passes that failed (API server away, ...).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from kubeacc.metrics.common import component_registry

#: A reset takes a second, programming an FPGA tens of seconds.
ACTION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class LifecycleMetrics:
    def __init__(self) -> None:
        self.registry = r = component_registry("lifecycle-agent")
        self.actions = Counter(
            "kubeacc_lifecycle_actions_total",
            "Operation targets this node ran, by action and result.",
            ["action", "result"],
            registry=r,
        )
        self.action_seconds = Histogram(
            "kubeacc_lifecycle_action_seconds",
            "Duration of an action on the node.",
            ["action"],
            buckets=ACTION_BUCKETS,
            registry=r,
        )
        self.pass_errors = Counter(
            "kubeacc_lifecycle_pass_errors_total", "Agent passes that failed.", registry=r
        )
