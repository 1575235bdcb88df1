"""What a node shows on the API server: its published devices and its kubeacc.io/ labels."""

from __future__ import annotations

from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.dra import DRIVER_NAME


def published_devices(client: Client, node: str) -> list[str]:
    """The names of the devices in the node's ResourceSlices of the kubeacc.io driver."""
    found = client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME})
    return sorted(d.name for s in found for d in (s.spec.devices or []))


def kubeacc_labels(client: Client, node: str) -> dict[str, str]:
    meta = client.get(Node, node).metadata
    labels = (meta.labels if meta is not None else None) or {}
    return {k: v for k, v in labels.items() if k.startswith("kubeacc.io/")}
