"""Drains in force follow their devices: a MIG partition or SR-IOV VF that appears while its
GPU or NIC is drained by eviction gets its DeviceTaintRule.

A drain makes the rules of the partitions and VFs published when it starts
(:func:`kubeacc.controller.taintrules.ensure`); one made later (a partition created, VFs enabled)
would otherwise be handed out to new pods and keep them while its parent is drained. Each pass
where some Accelerator is cordoned compares the drain rules with the node slices the controller
watches (:func:`kubeacc.controller.taintrules.missing`) and creates what is missing, counted
(``kubeacc_controller_device_taint_rules_total{step="created"}``) and evented on the drain's
operation. Uncordon deletes these rules with the others (by the Accelerator annotation).

The slice watch runs only while some drain is in force: the first pass that sees a cordoned
Accelerator starts it (its first LIST wakes the controller for the comparison), and the first pass
with none closes it. Without drains the controller reads no ResourceSlices at all, so a fleet's
slice churn (every agent republishing on a health change) costs it nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from lightkube import Client

from kubeacc.contracts.names import DOMAIN
from kubeacc.controller import taintrules
from kubeacc.crds.events import emit_event
from kubeacc.crds.watch import WatchCache
from kubeacc.metrics.controller import ControllerMetrics

log = logging.getLogger(__name__)


class DrainFollower:
    """Creates the drain rules of partitions and VFs that appeared during a drain."""

    def __init__(
        self,
        client: Client,
        *,
        slices: Callable[[], WatchCache],
        operations: WatchCache,
        metrics: ControllerMetrics,
    ) -> None:
        self.client = client
        #: Makes the (not yet started) watch of kubeacc.io's slices, when a drain needs it.
        self._make_slices = slices
        self._slices: WatchCache | None = None
        self.operations = operations
        self.metrics = metrics

    @property
    def watching(self) -> bool:
        """Whether the slice watch runs (some drain was in force at the last pass)."""
        return self._slices is not None

    def close(self) -> None:
        """Stop the slice watch, if it runs."""
        slices, self._slices = self._slices, None
        if slices is not None:
            slices.close()

    def reconcile(self, accelerators: dict[str, dict[str, Any]]) -> list[str]:
        """Create the missing rules; the names of those created."""
        if not any((a.get("spec") or {}).get("cordoned") for a in accelerators.values()):
            self.close()  # no drain in force: no rules to list, no slices to read
            return []
        if self._slices is None:
            self._slices = self._make_slices()
            self._slices.start()
        if not self._slices.synced.is_set():
            return []  # its first LIST wakes the controller for another pass
        bodies = taintrules.missing(taintrules.drain_rules(self.client), self._slices.items())
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
