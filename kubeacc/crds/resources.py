"""lightkube resource classes for the kubeacc.io custom resources, and CRD installation."""

from __future__ import annotations

import time
from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from kubeacc.crds.api import GROUP, VERSION

Accelerator: type[GenericGlobalResource] = create_global_resource(
    GROUP, VERSION, "Accelerator", "accelerators"
)
AcceleratorPolicy: type[GenericGlobalResource] = create_global_resource(
    GROUP, VERSION, "AcceleratorPolicy", "acceleratorpolicies"
)
AcceleratorOperation: type[GenericNamespacedResource] = create_namespaced_resource(
    GROUP, VERSION, "AcceleratorOperation", "acceleratoroperations"
)


def install_crds(client: Client, timeout: float = 30, field_manager: str = "kubeacc") -> None:
    """Server-side apply the CRDs and wait until the API server serves them (Established)."""
    from kubeacc.crds.manifests import crds  # the pydantic API types: not on a node daemon's path

    names = []
    for crd in crds():
        name = crd["metadata"]["name"]
        names.append(name)
        client.patch(
            CustomResourceDefinition,
            name,
            crd,
            patch_type=PatchType.APPLY,
            field_manager=field_manager,
            force=True,
        )
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            obj = client.get(CustomResourceDefinition, name)
            conds = (obj.status.conditions if obj.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s")
            time.sleep(0.1)
    # Established does not mean served yet: the first requests may get 429 "storage is
    # (re)initializing" for a moment. Wait until every kind can be listed.
    for kind in (Accelerator, AcceleratorPolicy, AcceleratorOperation):
        while True:
            try:
                if kind is AcceleratorOperation:
                    list(client.list(kind, namespace="*"))
                else:
                    list(client.list(kind))
                break
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def as_dict(obj: Any) -> dict[str, Any]:
    """A generic resource (or anything with to_dict) as a plain dict."""
    if isinstance(obj, dict):
        return obj
    data = obj.to_dict()
    assert isinstance(data, dict)
    return data


def is_not_found(exc: ApiError) -> bool:
    return int(exc.status.code or 0) == 404
