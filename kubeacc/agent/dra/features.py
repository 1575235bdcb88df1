"""Which ResourceSlice fields the API server keeps, and what to leave out where it drops them.

kube-acc relies on three DRA features for safety, each behind a feature gate of the API server
(beta and on in Kubernetes 1.36, alpha and off in 1.34 and 1.35): device ``taints``
(DRADeviceTaints: a drained or unhealthy device is not allocated), ``sharedCounters`` /
``consumesCounters`` (DRAPartitionableDevices: a GPU and its MIG partitions are never both
allocated) and ``allowMultipleAllocations`` with ``capacity.requestPolicy``
(DRAConsumableCapacity: memory shares). With a gate off the API server drops the field without
an error, and a drained GPU, or a GPU and its partition, go to two pods.

:func:`probe` asks the API server by a dry-run create of probe slices in the node's own pool
(nothing is stored) and reads back what it kept. :func:`restrict` then publishes only what the
cluster enforces (docs/security.md, "Cluster features"):

* taints dropped: tainted devices are left out (nothing drained or unhealthy is allocatable),
  but those with only ``None`` taints (degraded, still usable) are published without them;
* partitionable devices dropped: MIG partitions and counter sets are left out, whole GPUs are
  published without ``consumesCounters``;
* consumable capacity dropped: memory-shared devices are published whole (one claim each).

One more field is a convenience, not a safety matter, and is probed only when a device carries
it: ``bindingConditions`` (DRADeviceBindingConditions, with DRAResourceClaimDeviceStatus; beta
and on from 1.36). Where it is dropped, :func:`without_binding` takes it off and FPGAs are
programmed at prepare, as before (:mod:`kubeacc.agent.dra.fpga.binding`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict

log = logging.getLogger(__name__)

#: Index of the probe slices' name (``<node>-kubeacc.io-<index>``, the admission policy's form).
PROBE_INDEX = 999999
PROBE = "kubeacc-probe"


@dataclass(frozen=True)
class SliceFeatures:
    """Whether the API server keeps each group of fields (True: kept or unknown)."""

    taints: bool = True
    partitionable: bool = True
    consumable: bool = True
    #: ``bindingConditions`` kept; None: not asked yet (no device carried them), or not
    #: answered.
    binding: bool | None = None
    #: Some group could not be asked (the API server away): counted as kept for now and asked
    #: again before the next publish. An agent started during an API server outage kept what
    #: it could not ask for good (issue 46's fault runner: FPGAs programmed at prepare until
    #: the agent restarted).
    unsure: bool = False

    def dropped(self) -> list[str]:
        """The gates whose fields are dropped, for messages."""
        names = {
            "taints": "DRADeviceTaints",
            "partitionable": "DRAPartitionableDevices",
            "consumable": "DRAConsumableCapacity",
        }
        return [gate for field, gate in names.items() if not getattr(self, field)]


def _slice(node: str, spec: dict[str, Any]) -> ResourceSlice:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-kubeacc.io-{PROBE_INDEX}"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            **spec,
        },
    }
    return cast(ResourceSlice, ResourceSlice.from_dict(obj))


def _kept(client: Client, node: str, spec: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Does a dry-run create keep ``spec`` at ``path`` (keys, ``0`` for a list's first)?"""
    try:
        got: Any = as_dict(client.create(_slice(node, spec), dry_run=True))["spec"]
    except ApiError as exc:
        if exc.status.code == 422:  # the field dropped, the rest invalid without it
            return False
        raise
    for key in path:
        if isinstance(got, list):
            got = got[int(key)] if got else None
        elif isinstance(got, dict):
            got = got.get(key)
        if not got:
            return False
    return True


def probe(client: Client, node: str) -> SliceFeatures:
    """What the API server keeps of kube-acc's slices; unknown (an error) counts as kept."""
    one = {"memory": {"value": "1Gi"}}
    tests: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
        "taints": (
            {
                "devices": [
                    {"name": PROBE, "taints": [{"key": "kubeacc.io/probe", "effect": "NoSchedule"}]}
                ]
            },
            ("devices", "0", "taints"),
        ),
        "consumable": (
            {
                "devices": [
                    {
                        "name": PROBE,
                        "allowMultipleAllocations": True,
                        "capacity": {
                            "kubeacc.io/memory": {
                                "value": "1Gi",
                                "requestPolicy": {"default": "1Mi", "validRange": {"min": "1Mi"}},
                            }
                        },
                    }
                ]
            },
            ("devices", "0", "allowMultipleAllocations"),
        ),
        "partitionable": (
            {"sharedCounters": [{"name": PROBE, "counters": one}]},
            ("sharedCounters", "0", "counters"),
        ),
    }
    kept: dict[str, bool] = {}
    unsure = False
    for name, (spec, path) in tests.items():
        try:
            kept[name] = _kept(client, node, spec, path)
        except Exception as exc:  # the API server away, RBAC, ...: do not block on it
            log.warning("cannot tell whether the API server keeps ResourceSlice %s: %s", name, exc)
            kept[name] = True
            unsure = True
    if kept["partitionable"]:
        consumes = {
            "devices": [
                {"name": PROBE, "consumesCounters": [{"counterSet": PROBE, "counters": one}]}
            ]
        }
        try:
            kept["partitionable"] = _kept(
                client, node, consumes, ("devices", "0", "consumesCounters")
            )
        except Exception as exc:
            log.warning("cannot tell whether the API server keeps consumesCounters: %s", exc)
            unsure = True
    return SliceFeatures(**kept, unsure=unsure)


#: The device fields of binding conditions (KEP-5007).
BINDING_FIELDS = ("bindingConditions", "bindingFailureConditions", "bindsToNode")


def probe_binding(client: Client, node: str) -> bool | None:
    """Does the API server keep a device's ``bindingConditions``? None when it could not be
    asked (the caller publishes without them for now, as for no: a device whose conditions
    were dropped would be given out unprogrammed, and programming at prepare is the safe way
    round; and asks again before its next publish)."""
    spec = {
        "devices": [
            {
                "name": PROBE,
                "bindingConditions": ["kubeacc.io/Probe"],
                "bindingFailureConditions": ["kubeacc.io/ProbeFailed"],
            }
        ]
    }
    try:
        return _kept(client, node, spec, ("devices", "0", "bindingConditions"))
    except Exception as exc:
        log.warning("cannot tell whether the API server keeps bindingConditions: %s", exc)
        return None


def without_binding(devices: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``devices`` with their binding conditions taken off."""
    return [
        {k: v for k, v in d.items() if k not in BINDING_FIELDS}
        if any(k in d for k in BINDING_FIELDS)
        else d
        for d in devices
    ]


def restrict(
    devices: Sequence[dict[str, Any]],
    counter_sets: Sequence[dict[str, Any]],
    features: SliceFeatures,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(devices, counter sets) the cluster enforces, and the names of the devices left out."""
    out: list[dict[str, Any]] = []
    left: list[str] = []
    for dev in devices:
        d = dict(dev)
        if not features.taints and d.get("taints"):
            if any(t.get("effect") != "None" for t in d["taints"]):
                left.append(str(d["name"]))
                continue
            d.pop("taints")  # only informational ones: the device is still usable
        if not features.partitionable and d.get("consumesCounters"):
            if "migProfile" in (d.get("attributes") or {}):
                left.append(str(d["name"]))
                continue
            d.pop("consumesCounters")
        if not features.consumable and d.get("allowMultipleAllocations"):
            d.pop("allowMultipleAllocations")
            d["capacity"] = {k: {"value": v["value"]} for k, v in (d.get("capacity") or {}).items()}
        out.append(d)
    return out, ([] if not features.partitionable else list(counter_sets)), left
