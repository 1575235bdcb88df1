"""Who uses each device of a node, as ``status.allocatedTo`` entries of its Accelerator.

Two sources, one per serving mode:

* DRA: the claims this agent has prepared (its checkpoint) -- the ResourceClaim itself and the
  pods its ``status.reservedFor`` names. A device stays in use from NodePrepareResources until
  NodeUnprepareResources, which the kubelet calls only after the pod's containers are gone.
* Device plugin: the kubelet's pod-resources ``List``: every container holding device IDs of a
  ``kubeacc.io/...`` resource (a PCI address, or ``<address>::<replica>`` with sharing).

A claim for an SR-IOV virtual function (``<pf>-vf<N>``) counts as a use of its physical
function, which is what the Accelerator stands for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.enforcement import claim_enforcement
from kubeacc.contracts.unitid import id_gpu_key
from kubeacc.model.reserved import reservations
from kubeacc.node.kubeletapi import podresources_v1_pb2 as pr
from kubeacc.node.sharelimit import container_account

#: device name -> its consumers (``Consumer`` objects as API dicts), in a stable order.
Users = dict[str, list[dict[str, str]]]
#: (namespace, name, uid) -> the claim as the watch cache holds it, or None.
ClaimLookup = Callable[[str, str, str], dict[str, Any] | None]
#: The most entries ``status.allocatedTo`` may hold (CRD schema).
MAX_CONSUMERS = 64
RESOURCE_DOMAIN = "kubeacc.io/"
_VF = re.compile(r"^(?P<pf>.+)-vf\d+$")
_MIG = re.compile(r"^(?P<pf>.+?)-mig-.+$")


def accelerator_device(device: str, known: Iterable[str]) -> str:
    """The Accelerator's device a slice device belongs to (a VF belongs to its PF, a MIG
    partition to its GPU)."""
    m = _VF.match(device) or _MIG.match(device)
    if m and m.group("pf") in set(known):
        return m.group("pf")
    return device


def _add(users: Users, device: str, consumer: dict[str, str]) -> None:
    entries = users.setdefault(device, [])
    if consumer not in entries:
        entries.append(consumer)


def dra_users(
    prepared: Mapping[str, PreparedClaim], lookup: ClaimLookup, devices: Iterable[str]
) -> Users:
    """Consumers of the devices behind the prepared claims (uid -> claim)."""
    known = set(devices)
    users: Users = {}
    for uid, claim in sorted(prepared.items(), key=lambda kv: (kv[1].namespace, kv[1].name)):
        ref = {"kind": "ResourceClaim", "namespace": claim.namespace, "name": claim.name}
        ref["uid"] = uid
        obj = lookup(claim.namespace, claim.name, uid) or {}
        pods = [
            {"kind": r.kind, "namespace": claim.namespace, "name": r.name, "uid": r.uid}
            for r in reservations(obj)
            if r.uid
        ]
        shares = claim_enforcement(uid, claim)
        for dev in claim.devices:
            target = accelerator_device(dev.device, known)
            how = shares.get(dev.device)
            for consumer in ({**ref, "enforcement": how} if how else ref, *pods):
                _add(users, target, consumer)
    return users


def device_plugin_users(
    pods: Iterable[pr.PodResources],
    by_address: Mapping[str, str],
    enforcement: Mapping[tuple[str, str], str] | None = None,
    shared_ids: Mapping[tuple[str, str], str] | None = None,
) -> Users:
    """Consumers of device-plugin devices; ``by_address`` maps PCI address -> device name,
    ``shared_ids`` (shared resource, ID key) -> device name (the unit IDs of a shared GPU,
    kubeacc.deviceplugin.shared), ``enforcement`` (share resource, device name) -> how a
    share's limits are enforced (kubeacc.node.sharelimit)."""
    users: Users = {}
    for pod in pods:
        consumer = {"kind": "Pod", "namespace": pod.namespace, "name": pod.name}
        for container in pod.containers:
            for devices in container.devices:
                if not devices.resource_name.startswith(RESOURCE_DOMAIN):
                    continue
                for device_id in devices.device_ids:
                    name = by_address.get(device_id.split("::", 1)[0]) or (shared_ids or {}).get(
                        (devices.resource_name, id_gpu_key(device_id))
                    )
                    if name is None:
                        continue
                    how = (enforcement or {}).get((devices.resource_name, name))
                    _add(users, name, {**consumer, "enforcement": how} if how else consumer)
    return users


def plugin_accounts(pods: Iterable[pr.PodResources]) -> set[str]:
    """The share accounts of the containers that hold kube-acc device-plugin resources now
    (kubeacc.node.sharelimit.container_account): the ones to keep."""
    return {
        container_account(f"{pod.namespace}/{pod.name}", container.name)
        for pod in pods
        for container in pod.containers
        if any(d.resource_name.startswith(RESOURCE_DOMAIN) for d in container.devices)
    }


def merge(*parts: Users) -> Users:
    """One consumer list per device (capped at :data:`MAX_CONSUMERS`)."""
    out: Users = {}
    for part in parts:
        for device, consumers in part.items():
            for c in consumers:
                _add(out, device, c)
    return {d: c[:MAX_CONSUMERS] for d, c in out.items()}
