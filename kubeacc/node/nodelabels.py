"""Node labels from what discovery found, so admins and nodeSelectors can use them.

For every device type on the node (``T`` = gpu, fpga, nic, xpu, accelerator):

* ``kubeacc.io/T.count``: devices of that type;
* ``kubeacc.io/T.model``: the most common model (label-safe: other characters become ``-``);
* ``kubeacc.io/T.memory``: the smallest device memory of that type, in MiB, where known;
* ``kubeacc.io/T.driver``: ``true`` when every device of that type has a kernel driver bound;
* ``kubeacc.io/T.driver-version``: the vendor driver's version, where discovery reads one.

The labels are written with server-side apply under their own field manager, so the API server
removes a label the agent applied before and no longer applies (a type that disappeared),
and never touches labels set by anyone else.

Given a watch of the Node (``cache``), the periodic forced re-apply reads the labels from it and
writes only when someone changed them: an idle node sends nothing.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from kubeacc.crds.api import MODEL_LABEL, NODE_LABEL, TYPE_LABEL
from kubeacc.crds.resources import as_dict
from kubeacc.crds.watch import WatchCache
from kubeacc.model import Device, DeviceType, Inventory

log = logging.getLogger(__name__)

PREFIX = "kubeacc.io/"
FIELD_MANAGER = "kubeacc-node-labels"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """``text`` as a valid label value (at most 63 characters, alphanumeric at both ends)."""
    value = _UNSAFE.sub("-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def accelerator_labels(node: str, device: Device | None) -> dict[str, str]:
    """The labels of ``device``'s Accelerator object: its node, type and model (label-safe),
    what an AcceleratorOperation's ``spec.targetSelector`` selects on."""
    labels = {NODE_LABEL: node}
    if device is not None:
        labels[TYPE_LABEL] = device.type.value
        if model := label_value(device.model):
            labels[MODEL_LABEL] = model
    return labels


def node_labels(inventory: Inventory) -> dict[str, str]:
    """The labels that describe ``inventory`` (see the module docstring)."""
    by_type: dict[DeviceType, list[Device]] = {}
    for dev in inventory.devices:
        by_type.setdefault(dev.type, []).append(dev)
    labels: dict[str, str] = {}
    for kind, devices in sorted(by_type.items()):
        key = f"{PREFIX}{kind.value}."
        labels[key + "count"] = str(len(devices))
        model = _most_common(d.model for d in devices)
        if model and (value := label_value(model)):
            labels[key + "model"] = value
        memory = [d.memory_bytes for d in devices if d.memory_bytes]
        if memory:
            labels[key + "memory"] = str(min(memory) // (1024 * 1024))
        bound = [d.pci is not None and bool(d.pci.driver) for d in devices]
        labels[key + "driver"] = "true" if all(bound) else "false"
        version = _most_common(d.driver_version for d in devices)
        if version and (value := label_value(version)):
            labels[key + "driver-version"] = value
    return labels


def _most_common(values: Iterable[str | None]) -> str | None:
    counts = Counter(v for v in values if v)
    if not counts:
        return None
    return min(counts, key=lambda v: (-counts[v], v))


def labels_changed(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """A ``wake_if`` for a Node watch: only a Node appearing, going, or its labels changing."""
    if old is None or new is None:
        return True
    return (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels")


class NodeLabeler:
    """Keeps the node's ``kubeacc.io/`` labels equal to the last inventory's."""

    def __init__(self, client: Client, node: str, cache: WatchCache | None = None) -> None:
        self.client = client
        self.node = node
        #: A watch of this one Node (read instead of a GET while it is synced).
        self.cache = cache
        self._applied: dict[str, str] | None = None

    def _current(self) -> dict[str, Any] | None:
        """The Node as the server has it (None: there is none)."""
        if self.cache is not None and self.cache.synced.is_set():
            return self.cache.get(self.node)
        try:
            return as_dict(self.client.get(Node, self.node))
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            return None

    def apply(self, labels: dict[str, str], *, force: bool = False) -> bool:
        """Write ``labels`` (and drop the ones applied before but not now); True if written.
        ``force``: check the Node and write again what someone else changed."""
        if labels == self._applied and not force:
            return False
        # Server-side apply would create a missing Node: only label one that exists.
        node = self._current()
        if node is None:
            log.warning("node %s not found: no labels", self.node)
            return False
        if labels == self._applied:
            have = (node.get("metadata") or {}).get("labels") or {}
            if all(have.get(k) == v for k, v in labels.items()):
                return False
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node, "labels": labels},
        }
        written = self.client.patch(
            Node,
            self.node,
            body,
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        if self.cache is not None:
            self.cache.observe(written)
        if labels != self._applied:
            log.info(
                "node %s labelled: %s", self.node, ", ".join(f"{k}={v}" for k, v in labels.items())
            )
        self._applied = dict(labels)
        return True

    def remove_all(self) -> None:
        """Take every label this agent applied off the node (uninstall)."""
        self.apply({}, force=True)
