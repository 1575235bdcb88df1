"""AcceleratorPolicy -> DeviceClass.

A policy named ``P`` generates the DeviceClass ``spec.deviceClass.name`` or, by default,
``P.policy.kubeacc.io`` (a suffix that cannot collide with the driver's own classes such as
``gpu.kubeacc.io``). The class selects devices of the one DRA driver ``kubeacc.io`` with a CEL
expression over the attributes the driver publishes (``type``, ``vendor``, ``model``), and passes
the sharing settings to the driver as opaque configuration (a ``SharingConfig``, defined once in
:mod:`kubeacc.crds.opaque` for this generator and the agent that validates it). A policy that
selects GPUs alone and time-slices them or serves them with MPS adds a ``GpuConfig`` the agent
applies on the GPU; a memory-shared or MPS policy's class selects only devices published as
memory-shared (``device.allowMultipleAllocations``), which the agents do for the devices the
policy selects (:mod:`kubeacc.agent.dra.sharing.policyshare`). A ``MIG`` policy's class
selects only the MIG partitions of its ``migProfiles`` (attribute ``migProfile``), which the
agents publish for the MIG-mode GPUs the policy selects; every other policy's class selects
whole devices only (``!has(...migProfile)``), as the driver's own classes do: a partition is
only ever given where it was asked for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from kubeacc.contracts.names import MIG_PROFILE_ATTR
from kubeacc.crds.api import (
    API_VERSION,
    MEMORY_SHARED_MODES,
    POLICY_CLASS_SUFFIX,
    POLICY_LABEL,
    SharingMode,
)
from kubeacc.crds.controlread import policy_spec
from kubeacc.crds.opaque import policy_gpu_parameters, sharing_parameters
from kubeacc.crds.views import PolicySpecView, SelectorView
from kubeacc.model import DeviceType

DRIVER = "kubeacc.io"
SPEC_HASH_ANNOTATION = "kubeacc.io/spec-hash"


def class_name(policy_name: str, spec: PolicySpecView) -> str:
    """``spec``: the policy's schema Struct (kubeacc.crds.controlread)."""
    return spec.device_class.name or f"{policy_name}{POLICY_CLASS_SUFFIX}"


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def cel_selector(selector: SelectorView) -> str:
    """The CEL expression of a policy selector over the kubeacc.io driver's attributes."""
    attrs = f'device.attributes["{DRIVER}"]'
    terms = [f'device.driver == "{DRIVER}"']
    if selector.types:
        terms.append(f"{attrs}.type in {_cel_list([str(t) for t in selector.types])}")
    if selector.vendors:
        terms.append(f"{attrs}.vendor in {_cel_list(selector.vendors)}")
    if selector.models:
        terms.append(f"{attrs}.model in {_cel_list(selector.models)}")
    return " && ".join(terms)


def mig_selector(profiles: Sequence[str]) -> str:
    """CEL for the MIG partitions of ``profiles``: ``has()`` first, since a device without the
    attribute (a whole GPU) would otherwise fail the claim's scheduling with *no such key*."""
    attr = f'device.attributes["{DRIVER}"].{MIG_PROFILE_ATTR}'
    return f"has({attr}) && {attr} in {_cel_list(sorted(set(profiles)))}"


def whole_device_selector() -> str:
    """CEL for a whole device: never a MIG partition (a device with attribute ``migProfile``)."""
    return f'!has(device.attributes["{DRIVER}"].{MIG_PROFILE_ATTR})'


def device_class(policy: dict[str, Any]) -> dict[str, Any]:
    """The DeviceClass manifest a policy object generates (owned by the policy)."""
    meta = policy["metadata"]
    spec = policy_spec(policy)
    expression = cel_selector(spec.selector)
    if spec.sharing.mode in MEMORY_SHARED_MODES:
        # Only devices the agents publish as memory-shared for this policy: a claim of this
        # class gets a share, never a whole device of a node that does not share it (yet).
        expression += " && device.allowMultipleAllocations"
    elif spec.sharing.mode == SharingMode.MIG:
        expression += " && " + mig_selector(spec.sharing.mig_profiles)
    else:
        expression += " && " + whole_device_selector()
    configs = [sharing_parameters(meta["name"], spec.sharing)]
    gpu = policy_gpu_parameters(spec.sharing, spec.selector.types == [DeviceType.GPU])
    if gpu is not None:
        configs.append(gpu)
    body: dict[str, Any] = {
        "selectors": [{"cel": {"expression": expression}}],
        "config": [{"opaque": {"driver": DRIVER, "parameters": p}} for p in configs],
    }
    if spec.device_class.extended_resource_name:
        body["extendedResourceName"] = spec.device_class.extended_resource_name
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {
            "name": class_name(meta["name"], spec),
            "labels": {POLICY_LABEL: meta["name"]},
            "annotations": {SPEC_HASH_ANNOTATION: digest},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "AcceleratorPolicy",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": body,
    }
