"""Who holds each device, for ``kubeacc plan``: the question asked right after "why is my pod
pending".

Three paths hand out kube-acc's devices, and each leaves its own trace in the API:

* DRA: a ResourceClaim's ``status.allocation`` names the devices; ``status.reservedFor`` the
  pods using it.
* The scheduler extender: its decision, annotation ``kubeacc.io/devices`` on the bound pod,
  names the GPUs of each container (whole or a share).
* The device plugin alone: the pod asks for ``kubeacc.io/<type>`` in its limits and the kubelet
  picks the devices; the API holds only the count.

A pod that has finished (Succeeded/Failed) or is not bound yet holds nothing by the extender or
the device plugin; a claim holds its devices until it is deallocated, pod or no pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubeacc.model import DeviceType
from kubeacc.model.reserved import reservations

DRA = "DRA"
EXTENDER = "extender"
DEVICE_PLUGIN = "device plugin"
#: The extended resources of the device plugin: kubeacc.io/<type>.
PLUGIN_RESOURCES = frozenset(f"kubeacc.io/{t.value}" for t in DeviceType)
_FINISHED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Held:
    """One device (or, for the device plugin alone, a count of them) and who holds it."""

    node: str
    device: str
    path: str
    #: namespace/name of the claim (DRA), None for the other paths
    claim: str | None
    pods: tuple[str, ...]
    #: "whole", "share" or, for the device plugin, "N of kubeacc.io/<type>"
    use: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "device": self.device,
            "path": self.path,
            "claim": self.claim,
            "pods": list(self.pods),
            "use": self.use,
        }

    def row(self) -> list[str]:
        return [
            self.node,
            self.device,
            self.use,
            self.claim or "-",
            ", ".join(self.pods) or "(no pod)",
            self.path,
        ]


HEADER = ("NODE", "DEVICE", "USE", "CLAIM", "PODS", "PATH")


def _ns_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name", "?"))


def _claim_held(claim: dict[str, Any]) -> list[Held]:
    ns, name = _ns_name(claim)
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    pods = tuple(r.ref(ns) for r in reservations(claim))
    return [
        Held(
            node=str(r.get("pool", "?")),
            device=str(r.get("device", "?")),
            path=DRA,
            claim=f"{ns}/{name}",
            pods=pods,
            use="share" if r.get("shareID") else "whole",
        )
        for r in results
        if isinstance(r, dict)
    ]


def _pod_held(pod: dict[str, Any]) -> list[Held]:
    from kubeacc.contracts.trusted import trusted_decision

    ns, name = _ns_name(pod)
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in _FINISHED:
        return []
    ref = (f"{ns}/{name}",)
    # What the extender itself counts: a decision consistent with the pod's requests.
    decision, _ = trusted_decision(pod)
    if decision is not None:
        return [
            Held(str(node), dev, EXTENDER, None, ref, "whole" if c.whole else "share")
            for c in decision.containers
            for dev in c.devices
        ]
    counts: dict[str, int] = {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        limits = ((c or {}).get("resources") or {}).get("limits") or {}
        for res, qty in limits.items():
            if res in PLUGIN_RESOURCES:
                try:
                    counts[res] = counts.get(res, 0) + int(str(qty))
                except ValueError:
                    continue
    return [
        Held(str(node), "(chosen by the kubelet)", DEVICE_PLUGIN, None, ref, f"{n} of {res}")
        for res, n in sorted(counts.items())
        if n > 0
    ]


def held_devices(objs: list[dict[str, Any]], namespace: str | None = None) -> list[Held]:
    """What is held in ``objs`` (claims and pods), by node and device; only the holders in
    ``namespace`` when one is given."""
    out: list[Held] = []
    for o in objs:
        if namespace is not None and _ns_name(o)[0] != namespace:
            continue
        if o.get("kind") == "ResourceClaim":
            out += _claim_held(o)
        elif o.get("kind") == "Pod":
            out += _pod_held(o)
    return sorted(out, key=lambda h: (h.node, h.device, h.claim or "", h.pods))


def wants_pod(pod: dict[str, Any]) -> bool:
    """Whether ``kubeacc plan`` needs this live pod: it references claims, or holds devices by
    the extender or the device plugin."""
    if (pod.get("spec") or {}).get("resourceClaims"):
        return True
    return bool(_pod_held(pod))
