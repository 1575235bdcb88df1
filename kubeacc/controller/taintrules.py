"""Drain by eviction: a ``resource.k8s.io/v1`` DeviceTaintRule per drained device.

A ``Drain`` (or ``drainFirst``) operation with ``spec.evict`` does not wait for the holders of
its targets to go: the controller creates the rule ``kubeacc-drain-<accelerator>`` tainting the
device ``kubeacc.io/drain=<operation>:NoExecute`` (selected by driver, pool = node and device
name), and the kube-controller-manager's device-taint eviction deletes the pods whose claims
hold it. The rule lives as long as the cordon: ``Uncordon`` (or the end of the ``drainFirst``
operation that set it) deletes it. DeviceTaintRules are served by Kubernetes 1.37
(DRADeviceTaintRules, GA); where they are not, the operation fails and says so.
"""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource

from kubeacc.agent.dra import DRIVER_NAME
from kubeacc.crds.resources import is_not_found
from kubeacc.model.names import DOMAIN

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


def rule_name(accelerator: str) -> str:
    return (PREFIX + accelerator)[:_MAX_NAME]


def rule(accelerator: str, node: str, device: str, operation: str) -> dict[str, Any]:
    """The rule draining one device for ``operation`` (``<namespace>/<name>``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(accelerator),
            "labels": {f"{DOMAIN}/drain": "true"},
            "annotations": {f"{DOMAIN}/operation": operation},
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


def ensure(client: Client, accelerator: str, node: str, device: str, operation: str) -> bool:
    """Create the rule unless it exists; True when it was created."""
    body = rule(accelerator, node, device, operation)
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


def remove(client: Client, accelerator: str) -> bool:
    """Delete the rule of ``accelerator`` if there is one; True when one was deleted."""
    try:
        client.delete(DeviceTaintRule, rule_name(accelerator))
    except ApiError as exc:
        if is_not_found(exc) or exc.status.code == 405:
            return False
        raise
    return True
