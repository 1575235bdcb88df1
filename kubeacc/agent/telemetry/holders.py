"""Who holds each device, as the labels of its telemetry series.

From what the agent itself knows (the same sources as ``status.allocatedTo``,
:mod:`kubeacc.agent.users`): the DRA claims it prepared and the pods their ``reservedFor``
names, and the kubelet's pod-resources answer for device-plugin containers (with the
container's name). A share of a GPU, a MIG instance or a VF counts both for itself and for the
device it belongs to, so a whole GPU's series carry every holder of any slice of it.

Bounded: at most :data:`MAX_HOLDERS` holders per device, so a device's series number at most
that many per figure whatever the cluster does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.users import MAX_CONSUMERS, RESOURCE_DOMAIN, ClaimLookup, accelerator_device
from kubeacc.contracts.unitid import id_gpu_key
from kubeacc.model.reserved import POD, reservations
from kubeacc.node.kubeletapi import podresources_v1_pb2 as pr

MAX_HOLDERS = MAX_CONSUMERS


class Holder(NamedTuple):
    namespace: str
    pod: str
    container: str
    claim: str


#: device name -> its holders, in a stable order.
Holders = dict[str, list[Holder]]

NOBODY = Holder("", "", "", "")


def _add(out: Holders, device: str, holder: Holder) -> None:
    entries = out.setdefault(device, [])
    if holder not in entries and len(entries) < MAX_HOLDERS:
        entries.append(holder)


def _add_both(out: Holders, device: str, known: set[str], holder: Holder) -> None:
    _add(out, device, holder)
    whole = accelerator_device(device, known)
    if whole != device:
        _add(out, whole, holder)


def dra_holders(
    prepared: Mapping[str, PreparedClaim], lookup: ClaimLookup, devices: Iterable[str]
) -> Holders:
    """One holder per (claim, reserving pod); the claim alone while no pod reserves it."""
    known = set(devices)
    out: Holders = {}
    for uid, claim in sorted(prepared.items(), key=lambda kv: (kv[1].namespace, kv[1].name)):
        obj = lookup(claim.namespace, claim.name, uid) or {}
        # a pod group's pods are not named in the claim: the claim alone then
        pods = [r.name for r in reservations(obj) if r.kind == POD] or [""]
        for dev in claim.devices:
            for pod in pods:
                _add_both(out, dev.device, known, Holder(claim.namespace, pod, "", claim.name))
    return out


def device_plugin_holders(
    pods: Iterable[pr.PodResources],
    by_address: Mapping[str, str],
    shared_ids: Mapping[tuple[str, str], str] | None = None,
) -> Holders:
    """One holder per container with device IDs of a ``kubeacc.io/`` resource."""
    out: Holders = {}
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith(RESOURCE_DOMAIN):
                    continue
                for device_id in devices.device_ids:
                    name = by_address.get(device_id.split("::", 1)[0]) or (shared_ids or {}).get(
                        (devices.resource_name, id_gpu_key(device_id))
                    )
                    if name is not None:
                        _add(out, name, Holder(pod.namespace, pod.name, container.name, ""))
    return out


def merge(*parts: Holders) -> Holders:
    out: Holders = {}
    for part in parts:
        for device, holders in part.items():
            for h in holders:
                _add(out, device, h)
    return out
