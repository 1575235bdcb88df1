"""Claims of kube-acc's DRA driver still in use: what makes an uninstall unsafe.

A pod whose claim the agent prepared needs the same agent to unprepare it when the pod goes:
once the DaemonSet is gone, the kubelet retries ``NodeUnprepareResources`` ("driver kubeacc.io is
not registered") until a driver of that name registers again, and the pod stays Terminating.
So the chart's pre-delete hook refuses the uninstall while a ResourceClaim allocated by
``kubeacc.io`` is reserved for a pod, and names those pods; helm then removes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.model.reserved import reservations


@dataclass(frozen=True)
class InUse:
    """A claim with devices of kube-acc's driver, and the pods it is reserved for."""

    claim: str
    pods: tuple[str, ...]

    def line(self) -> str:
        return f"claim {self.claim}: pods {', '.join(self.pods)}"


def claims_in_use(claims: list[dict[str, Any]]) -> list[InUse]:
    """The claims (API dicts) allocated with at least one ``kubeacc.io`` device and reserved
    for at least one pod, sorted by namespace/name."""
    out: list[InUse] = []
    for c in claims:
        meta = c.get("metadata") or {}
        status = c.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not any(isinstance(r, dict) and r.get("driver") == DRIVER_NAME for r in results):
            continue
        ns = meta.get("namespace") or "default"
        pods = tuple(r.ref(ns) for r in reservations(c))
        if pods:
            out.append(InUse(f"{ns}/{meta.get('name', '?')}", pods))
    return sorted(out, key=lambda u: u.claim)
