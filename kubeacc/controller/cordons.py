"""Cordons the controller sets and lifts: ``spec.cordoned`` of an Accelerator, with the
annotation ``kubeacc.io/cordoned-by`` naming who set it (an operation ``<ns>/<name>``, or
``policy`` for an unhealthy device a policy asks to drain)."""

from __future__ import annotations

from typing import Any

from lightkube import Client
from lightkube.types import PatchType

from kubeacc.contracts.names import CORDONED_BY_ANNOTATION
from kubeacc.controller.status import FIELD_MANAGER
from kubeacc.controller.views import AcceleratorFacts
from kubeacc.crds.api import UnhealthyAction
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import Accelerator
from kubeacc.crds.watch import WatchCache
from kubeacc.model import HealthState

CORDONED_BY = CORDONED_BY_ANNOTATION
#: ``kubeacc.io/cordoned-by`` of a cordon set for an unhealthy device.
POLICY_CORDON = "policy"


class Cordons:
    """Sets and lifts cordons; ``cache``: the controller's Accelerators."""

    def __init__(self, client: Client, cache: WatchCache) -> None:
        self.client = client
        self.cache = cache

    def set(self, acc: dict[str, Any], by: str, value: bool) -> None:
        name = acc["metadata"]["name"]
        patch: dict[str, Any] = {
            "metadata": {"annotations": {CORDONED_BY: by if value else None}},
            "spec": {"cordoned": value},
        }
        written = self.client.patch(
            Accelerator, name, patch, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER
        )
        self.cache.observe(written)
        acc.setdefault("spec", {})["cordoned"] = value

    def reconcile_unhealthy(
        self,
        specs: dict[str, Any],
        accelerators: dict[str, dict[str, Any]],
        facts: dict[str, AcceleratorFacts],
    ) -> None:
        """Cordon an unhealthy device a policy asks to drain; lift that cordon once healthy.
        ``facts``: those of ``accelerators`` (:mod:`kubeacc.controller.views`)."""
        for name, acc in accelerators.items():
            fact = facts[name]
            health = fact.health
            by = (acc["metadata"].get("annotations") or {}).get(CORDONED_BY)
            if health is not None and health.healthy and fact.cordoned and by == POLICY_CORDON:
                self.set(acc, POLICY_CORDON, False)
                emit_event(self.client, acc, "Uncordoned", f"{name} is healthy again")
                continue
            if health is None or health.state is not HealthState.UNHEALTHY:
                continue
            actions = {specs[p].on_unhealthy for p in fact.covering}
            if UnhealthyAction.DRAIN in actions and not fact.cordoned:
                self.set(acc, POLICY_CORDON, True)
                emit_event(
                    self.client,
                    acc,
                    "Cordoned",
                    f"{name} is unhealthy ({health.reason or 'no reason given'}); a policy "
                    "asks to drain it: no new allocations",
                    warning=True,
                )
