"""Drain by eviction: a ``resource.k8s.io/v1`` DeviceTaintRule per drained device.

A ``Drain`` (or ``drainFirst``) operation with ``spec.evict`` does not wait for the holders of
its targets to go: the controller creates the rule ``kubeacc-drain-<accelerator>`` tainting the
device ``kubeacc.io/drain=<operation>:NoExecute`` (selected by driver, pool = node and device
name), and the kube-controller-manager's device-taint eviction deletes the pods whose claims
hold it. A device's MIG partitions (``<gpu>-mig-<profile>-<start>``) and SR-IOV virtual
functions (``<pf>-vf<N>``) are devices of their own in the slices, and a rule selects one device
name: each gets a rule too (``kubeacc-drain-<accelerator>-<suffix>``), found in the node's
slices when the drain starts, so a drained GPU's partitions and a drained NIC's VFs are covered.
A partition or VF that appears later while the drain is in force (a MIG partition made, VFs
enabled) gets its rule at the controller's next pass (:func:`missing`, fed by a watch of the
slices whose device names changed: :func:`device_names_changed`). The rules live as long as the
cordon: ``Uncordon`` (or the end of the ``drainFirst`` operation
that set it) deletes them (all rules annotated with the Accelerator). DeviceTaintRules are
served by Kubernetes 1.37 (DRADeviceTaintRules, GA); where they are not, the operation fails
and says so.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.contracts.names import DOMAIN, DRIVER_NAME, belongs_to
from kubeacc.crds.resources import as_dict, is_not_found

DeviceTaintRule = create_global_resource(
    "resource.k8s.io", "v1", "DeviceTaintRule", "devicetaintrules"
)

DRAIN_TAINT = f"{DOMAIN}/drain"
#: The prefix of a rule's name; the rest is the Accelerator's (``<node>-<device>``).
PREFIX = "kubeacc-drain-"
#: Rule names are DNS subdomains.
_MAX_NAME = 253


class TaintRulesNotServed(RuntimeError):
    """The API server serves no ``resource.k8s.io/v1`` DeviceTaintRules."""


#: The annotation naming the Accelerator a rule drains (rules of its partitions and VFs too).
ACCELERATOR_ANNOTATION = f"{DOMAIN}/accelerator"


def rule_name(accelerator: str, suffix: str = "") -> str:
    name = PREFIX + accelerator
    return (f"{name}-{suffix}" if suffix else name)[:_MAX_NAME]


def derived(device: str, names: Iterable[str]) -> list[str]:
    """Of the published device ``names``, the MIG partitions and VFs of ``device`` (the
    agent's naming, as its health taints find them: :func:`healthtaints.belongs_to`)."""
    return sorted(n for n in set(names) if n != device and belongs_to(n, device))


def published(client: Client, node: str) -> list[str]:
    """The names of the devices kubeacc.io publishes for ``node``."""
    return [
        str(d["name"])
        for s in client.list(
            ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME}
        )
        for d in as_dict(s)["spec"].get("devices") or []
    ]


def rule(
    accelerator: str, node: str, device: str, operation: str, suffix: str = ""
) -> dict[str, Any]:
    """The rule draining one device (or, with ``suffix``, one of its partitions or VFs,
    ``device`` then being that one's name) for ``operation`` (``<namespace>/<name>``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(accelerator, suffix),
            "labels": {f"{DOMAIN}/drain": "true"},
            "annotations": {
                f"{DOMAIN}/operation": operation,
                ACCELERATOR_ANNOTATION: accelerator,
            },
        },
        "spec": {
            "deviceSelector": {"driver": DRIVER_NAME, "pool": node, "device": device},
            "taint": {
                "key": DRAIN_TAINT,
                "value": operation.replace("/", ".")[:63],
                "effect": "NoExecute",
            },
        },
    }


def create(client: Client, body: dict[str, Any]) -> bool:
    """Create one rule; False when it exists already."""
    try:
        client.create(DeviceTaintRule.from_dict(body))
    except ApiError as exc:
        if exc.status.code == 409:
            return False
        if is_not_found(exc):  # a cluster-scoped create: only when the kind is not served
            raise TaintRulesNotServed(
                "the API server serves no resource.k8s.io/v1 DeviceTaintRules "
                "(DRADeviceTaintRules: GA in Kubernetes 1.37)"
            ) from exc
        raise
    return True


def ensure(client: Client, accelerator: str, node: str, device: str, operation: str) -> list[str]:
    """Create the rules of the device and of its partitions and VFs unless they exist; the
    names of those created."""
    bodies = [rule(accelerator, node, device, operation)]
    for name in derived(device, published(client, node)):
        bodies.append(rule(accelerator, node, name, operation, name[len(device) + 1 :]))
    return [str(b["metadata"]["name"]) for b in bodies if create(client, b)]


def drain_rules(client: Client) -> list[dict[str, Any]]:
    """The drain rules there are (none where DeviceTaintRules are not served)."""
    try:
        return [
            as_dict(r) for r in client.list(DeviceTaintRule, labels={f"{DOMAIN}/drain": "true"})
        ]
    except ApiError as exc:
        if is_not_found(exc):
            return []
        raise


def slice_names(s: dict[str, Any]) -> dict[str, Any]:
    """What the controller keeps of a ResourceSlice: ``metadata`` (name, resourceVersion),
    ``driver``, ``pool`` and the device ``names`` (a tuple of interned strings: nodes of one
    model publish the same names). A whole slice is some 3 KB a device as Python objects,
    260 KB a ``dgx-h100`` node with its VFs; this is what :func:`missing` reads
    (bench/drain_follow.py)."""
    meta = s.get("metadata") or {}
    spec = s.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "resourceVersion") if k in meta},
        "driver": spec.get("driver"),
        "pool": str((spec.get("pool") or {}).get("name")),
        "names": tuple(sys.intern(str(d.get("name"))) for d in spec.get("devices") or []),
    }


def device_names_changed(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """A ``wake_if`` for the slice watch (of :func:`slice_names`): a slice came, went or
    changed its device names (a partition or VF appeared); taints, attributes and the rest do
    not matter here."""
    if old is None or new is None:
        return True
    return sorted(old["names"]) != sorted(new["names"])


def missing(
    rules: Iterable[dict[str, Any]], slices: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The rules that drains in force still lack: for each device's own rule (named after its
    Accelerator), the partitions and VFs of that device now published in its pool (``slices``
    as :func:`slice_names` keeps them) that no rule selects yet; with the same operation and
    annotations as the device's rule."""
    selected = set()
    drains = []
    for r in rules:
        sel = (r.get("spec") or {}).get("deviceSelector") or {}
        selected.add((sel.get("pool"), sel.get("device")))
        meta = r.get("metadata") or {}
        notes = meta.get("annotations") or {}
        accelerator = notes.get(ACCELERATOR_ANNOTATION)
        if accelerator and meta.get("name") == rule_name(accelerator):
            drains.append((str(accelerator), str(sel.get("pool")), str(sel.get("device")), notes))
        # else a partition's or VF's rule, or not one of ours
    wanted = {pool for _, pool, _, _ in drains}
    pools: dict[str, list[str]] = {}
    for s in slices:  # only the drained devices' pools are gathered
        if s["pool"] in wanted and s["driver"] == DRIVER_NAME:
            pools.setdefault(s["pool"], []).extend(s["names"])
    out = []
    for accelerator, pool, device, notes in drains:
        operation = str(notes.get(f"{DOMAIN}/operation", ""))
        for name in derived(device, pools.get(pool, [])):
            if (pool, name) not in selected:
                out.append(rule(accelerator, pool, name, operation, name[len(device) + 1 :]))
    return out


def remove(client: Client, accelerator: str) -> list[str]:
    """Delete the rules of ``accelerator`` (its device's, its partitions' and VFs'); the names
    of those deleted."""
    try:
        names = [
            str(r.metadata.name)
            for r in client.list(DeviceTaintRule, labels={f"{DOMAIN}/drain": "true"})
            if r.metadata is not None
            and (r.metadata.annotations or {}).get(ACCELERATOR_ANNOTATION) == accelerator
        ]
    except ApiError as exc:
        if is_not_found(exc):  # not served: nothing to delete
            return []
        raise
    main = rule_name(accelerator)
    if main not in names:
        names.insert(0, main)  # a rule made before the annotation was
    gone = []
    for name in names:
        try:
            client.delete(DeviceTaintRule, name)
        except ApiError as exc:
            if is_not_found(exc) or exc.status.code == 405:
                continue
            raise
        gone.append(name)
    return gone
