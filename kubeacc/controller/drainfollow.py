"""Drains in force follow their devices: a MIG partition or SR-IOV VF that appears while its
GPU or NIC is drained by eviction gets its DeviceTaintRule.

A drain makes the rules of the partitions and VFs published when it starts
(:func:`kubeacc.controller.taintrules.ensure`); one made later (a partition created, VFs enabled)
would otherwise be handed out to new pods and keep them while its parent is drained. Each pass
where some Accelerator is cordoned compares the drain rules with the node slices the controller
watches (:func:`kubeacc.controller.taintrules.missing`) and creates what is missing, counted
(``kubeacc_controller_device_taint_rules_total{step="created"}``) and evented on the drain's
operation. Uncordon deletes these rules with the others (by the Accelerator annotation).
"""

from __future__ import annotations

import logging
from typing import Any

from lightkube import Client

from kubeacc.controller import taintrules
from kubeacc.crds.status import emit_event
from kubeacc.crds.watch import WatchCache
from kubeacc.metrics.controller import ControllerMetrics
from kubeacc.model.names import DOMAIN

log = logging.getLogger(__name__)


class DrainFollower:
    """Creates the drain rules of partitions and VFs that appeared during a drain."""

    def __init__(
        self,
        client: Client,
        *,
        slices: WatchCache,
        operations: WatchCache,
        metrics: ControllerMetrics,
    ) -> None:
        self.client = client
        self.slices = slices
        self.operations = operations
        self.metrics = metrics

    def reconcile(self, accelerators: dict[str, dict[str, Any]]) -> list[str]:
        """Create the missing rules; the names of those created."""
        if not any((a.get("spec") or {}).get("cordoned") for a in accelerators.values()):
            return []  # no drain in force: no rules to list
        bodies = taintrules.missing(taintrules.drain_rules(self.client), self.slices.items())
        made = []
        for body in bodies:
            if not taintrules.create(self.client, body):
                continue
            meta = body["metadata"]
            name = str(meta["name"])
            made.append(name)
            self.metrics.taint_rules.labels("created").inc()
            accelerator = meta["annotations"][taintrules.ACCELERATOR_ANNOTATION]
            selector = body["spec"]["deviceSelector"]
            message = (
                f"{name}: {selector['device']} on {selector['pool']} appeared while "
                f"{accelerator} is drained; tainted NoExecute, its pods are evicted"
            )
            about = self._about(meta["annotations"].get(f"{DOMAIN}/operation", ""))
            about = about or accelerators.get(accelerator)
            if about is not None:
                emit_event(self.client, about, "DeviceTaintRuleCreated", message)
            else:
                log.info("%s", message)
        return made

    def _about(self, operation: str) -> dict[str, Any] | None:
        """The drain's operation (``<namespace>/<name>``), if it is still there."""
        namespace, _, name = operation.partition("/")
        return self.operations.get(name, namespace) if name else None
