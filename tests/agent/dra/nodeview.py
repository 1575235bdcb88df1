"""What a node shows on the API server: its published devices and its kubeacc.io/ labels; and
an in-process agent for a Node without kubelet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.compose import compose_agent
from kubeacc.agent.options import options_from
from kubeacc.agent.runner import Agent
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed import Testbed


def lone_agent(testbed: Testbed, node: str, tmp: Path, **kw: Any) -> Agent:
    """A ``dgx-h100`` agent that publishes (no kubelet plugin, no Accelerator sync); ``kw``:
    other options (the admin's kubeconfig unless one is given)."""
    options: dict[str, Any] = {
        "kubeconfig": testbed.kubeconfig,
        "kubelet_root": tmp / "kubelet",
        "cdi_dir": tmp / "cdi",
        "state_dir": tmp / "state",
        "kubelet_plugin": False,
        "sync_accelerators": False,
    }
    host = SyntheticHost(profiles.build("dgx-h100", tmp / "host"))
    return compose_agent(host, options_from(node_name=node, **(options | kw)))


def published_devices(client: Client, node: str) -> list[str]:
    """The names of the devices in the node's ResourceSlices of the kubeacc.io driver."""
    found = client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME})
    return sorted(d.name for s in found for d in (s.spec.devices or []))


def kubeacc_labels(client: Client, node: str) -> dict[str, str]:
    meta = client.get(Node, node).metadata
    labels = (meta.labels if meta is not None else None) or {}
    return {k: v for k, v in labels.items() if k.startswith("kubeacc.io/")}
