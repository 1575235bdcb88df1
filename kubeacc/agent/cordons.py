"""How a cordoned device (``Accelerator.spec.cordoned``) is kept from new users.

* DRA: the device -- and its SR-IOV virtual functions -- carries the ResourceSlice taint
  ``kubeacc.io/cordoned`` with effect NoSchedule (DRADeviceTaints): the scheduler allocates it
  to no new claim, while claims already allocated keep it.
* Device plugin: the device is advertised ``Unhealthy``: the kubelet hands it to no new pod
  and lowers the node's allocatable, while running pods keep it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeacc.model import Health, HealthState, Inventory

CORDON_TAINT = "kubeacc.io/cordoned"


def _cordoned_name(device: str, cordoned: Mapping[str, str]) -> bool:
    if device in cordoned:
        return True
    gpu, mig, _ = device.partition("-mig-")  # a MIG partition of a cordoned GPU
    if mig and gpu in cordoned:
        return True
    pf, sep, vf = device.rpartition("-vf")
    return bool(sep) and vf.isdigit() and pf in cordoned


def with_cordon_taints(
    entries: list[dict[str, Any]], cordoned: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Slice entries with the cordon taint added to cordoned devices and their VFs."""
    if not cordoned:
        return entries
    taint = {"key": CORDON_TAINT, "effect": "NoSchedule"}
    return [
        {**e, "taints": [*e.get("taints", []), taint]} if _cordoned_name(e["name"], cordoned) else e
        for e in entries
    ]


def with_unhealthy(inv: Inventory, reasons: Mapping[str, str]) -> Inventory:
    """The inventory with the devices of ``reasons`` marked Unhealthy, each with its reason
    (what the device plugin serves)."""
    if not reasons or not any(d.name in reasons for d in inv.devices):
        return inv
    devices = [
        d.replace(health=Health(state=HealthState.UNHEALTHY, reason=reasons[d.name]))
        if d.name in reasons
        else d
        for d in inv.devices
    ]
    return inv.replace(devices=devices)


def with_cordons_unhealthy(inv: Inventory, cordoned: Mapping[str, str]) -> Inventory:
    """The inventory with cordoned devices marked Unhealthy (what the device plugin serves)."""
    return with_unhealthy(
        inv, {d: f"cordoned by {who or 'an administrator'}" for d, who in cordoned.items()}
    )
