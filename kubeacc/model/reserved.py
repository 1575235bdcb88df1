"""Who a ResourceClaim is reserved for (``status.reservedFor``): pods, and pod groups.

Since Kubernetes 1.37 a claim can be reserved for a whole pod group
(``DRAWorkloadResourceClaims``, beta, off by default): the entry is then
``{apiGroup: scheduling.k8s.io, resource: podgroups, name, uid}`` and names no pod; the kubelet
prepares the claim once per node for all the group's pods there and unprepares it when the
last of them goes. Whatever reads ``reservedFor`` (in use for an uninstall, ``allocatedTo``,
``plan``'s holders) reads it here, so a pod-group reservation counts everywhere a pod's does.
An entry of any other resource still counts as a reservation, under its resource's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

POD = "Pod"
POD_GROUP = "PodGroup"
_KINDS = {("", "pods"): POD, ("scheduling.k8s.io", "podgroups"): POD_GROUP}


@dataclass(frozen=True)
class Reservation:
    """One ``reservedFor`` entry: ``kind`` is ``Pod``, ``PodGroup`` or, for a consumer this
    code does not know, ``<resource>.<apiGroup>``."""

    kind: str
    name: str
    uid: str

    def ref(self, namespace: str) -> str:
        """``ns/name`` for a pod, ``ns/name (pod group)`` and the like for the others."""
        what = (
            "" if self.kind == POD else f" ({'pod group' if self.kind == POD_GROUP else self.kind})"
        )
        return f"{namespace}/{self.name}{what}"


def reservations(claim: Mapping[str, Any]) -> list[Reservation]:
    """The claim's ``status.reservedFor`` entries (API dict), malformed ones left out."""
    out = []
    for r in (claim.get("status") or {}).get("reservedFor") or []:
        if not isinstance(r, dict) or not r.get("name"):
            continue
        group, resource = str(r.get("apiGroup") or ""), str(r.get("resource") or "pods")
        kind = _KINDS.get((group, resource)) or f"{resource}.{group}".rstrip(".")
        out.append(Reservation(kind, str(r["name"]), str(r.get("uid") or "")))
    return out
