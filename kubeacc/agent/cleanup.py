"""What the node agents leave in the cluster, removed when kube-acc is uninstalled.

The agents' ResourceSlices (driver ``kubeacc.io``) and the Node labels they applied (field
manager ``kubeacc-node-labels``; admins' labels stay) outlive the DaemonSet. An agent still
shutting down may write once more, so the clean-up repeats until a pass finds nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ManagedFieldsEntry
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node.nodelabels import FIELD_MANAGER, PREFIX, NodeLabeler

log = logging.getLogger(__name__)


@dataclass
class Removed:
    slices: int = 0
    labelled_nodes: int = 0

    def __bool__(self) -> bool:
        return bool(self.slices or self.labelled_nodes)


def clean_once(client: Client) -> Removed:
    removed = Removed()
    for s in client.list(ResourceSlice, fields={"spec.driver": DRIVER_NAME}):
        if s.metadata and s.metadata.name:
            try:
                client.delete(ResourceSlice, s.metadata.name)
                removed.slices += 1
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
    for node in client.list(Node):
        meta = node.metadata
        if meta is None or not meta.name:
            continue
        if _owned_labels(meta.managedFields or []):
            NodeLabeler(client, meta.name).remove_all()
            removed.labelled_nodes += 1
    return removed


def _owned_labels(managed: list[ManagedFieldsEntry]) -> list[str]:
    """The labels the agents' field manager owns on an object."""
    owned: list[str] = []
    for entry in managed:
        if entry.manager == FIELD_MANAGER and entry.fieldsV1:
            labels = entry.fieldsV1.get("f:metadata", {}).get("f:labels", {})
            owned += [k.removeprefix("f:") for k in labels if k.startswith("f:" + PREFIX)]
    return owned


def clean(client: Client, settle: float = 5.0, timeout: float = 120.0) -> Removed:
    """Clean until a pass ``settle`` seconds after the last one finds nothing left."""
    total = Removed()
    deadline = time.monotonic() + timeout
    while True:
        done = clean_once(client)
        total.slices += done.slices
        total.labelled_nodes += done.labelled_nodes
        if not done or time.monotonic() > deadline:
            return total
        log.info("removed %d slices, labels of %d nodes", done.slices, done.labelled_nodes)
        time.sleep(settle)
