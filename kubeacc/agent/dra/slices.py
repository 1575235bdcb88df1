"""ResourceSlices of one node's pool: build them, and keep the API server in step.

The pool is named after the node and holds every device the agent discovered. When the pool
has more devices than one slice may hold it is split over several slices, each carrying the
pool's ``generation`` and ``resourceSliceCount``. Every change to the devices bumps the
generation, so schedulers never mix slices of two versions of the pool. Slices are written with
server-side apply under one field manager and are owned by the Node object (deleted with it).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

from lightkube import ApiError, Client
from lightkube.core.client import FieldSelector
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.dra import FIELD_MANAGER
from kubeacc.agent.dra.features import (
    BINDING_FIELDS,
    SliceFeatures,
    probe,
    probe_binding,
    restrict,
    without_binding,
)
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.watch import WatchCache

log = logging.getLogger(__name__)

#: resource.k8s.io/v1 limits (ResourceSliceMaxDevices / ...WithAdvancedFeatures): a slice whose
#: devices use taints may hold only 64 devices.
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_ADVANCED = 64
#: deploy/admission/agent-node-restriction.yaml: how far one write may move a slice's pool
#: generation forward (it never moves back).
GENERATION_STEP = 64
#: Label on every slice the agent writes, to find them again.
NODE_LABEL = "kubeacc.io/node"
#: ResourceSliceMaxCounterSets: counter sets (MIG GPUs) in one slice.
MAX_COUNTER_SETS_PER_SLICE = 8


def slice_fields(node: str) -> FieldSelector:
    """The field selector of ``node``'s slices of this driver."""
    return {"spec.nodeName": node, "spec.driver": DRIVER_NAME}


def slice_name(node: str, index: int) -> str:
    return f"{node}-kubeacc.io-{index}"


def chunk_devices(
    devices: Sequence[dict[str, Any]], max_per_slice: int = MAX_DEVICES_PER_SLICE
) -> list[list[dict[str, Any]]]:
    """Split ``devices`` into slices that respect the per-slice limit (never zero slices)."""
    if any(d.get("taints") or d.get("consumesCounters") for d in devices):
        max_per_slice = min(max_per_slice, MAX_DEVICES_PER_SLICE_ADVANCED)
    chunks = [list(devices[i : i + max_per_slice]) for i in range(0, len(devices), max_per_slice)]
    return chunks or [[]]


def devices_digest(devices: Sequence[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(devices, sort_keys=True).encode()).hexdigest()[:16]


def chunk_counters(counter_sets: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Counter sets in slices of their own (a slice has ``sharedCounters`` or ``devices``)."""
    n = MAX_COUNTER_SETS_PER_SLICE
    return [list(counter_sets[i : i + n]) for i in range(0, len(counter_sets), n)]


def build_slices(
    node: str,
    node_uid: str | None,
    devices: Sequence[dict[str, Any]],
    generation: int,
    max_per_slice: int = MAX_DEVICES_PER_SLICE,
    counter_sets: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The complete set of slice objects for the node's pool at ``generation``: the devices'
    slices, then those of the counter sets they consume (partitionable devices)."""
    chunks: list[list[dict[str, Any]]] = chunk_devices(devices, max_per_slice)
    counter_chunks = chunk_counters(counter_sets)
    total = len(chunks) + len(counter_chunks)
    out = []
    for i, chunk in enumerate([*chunks, *counter_chunks]):
        meta: dict[str, Any] = {
            "name": slice_name(node, i),
            "labels": {NODE_LABEL: node},
        }
        if node_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}
            ]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": meta,
                "spec": {
                    "driver": DRIVER_NAME,
                    "nodeName": node,
                    "pool": {
                        "name": node,
                        "generation": generation,
                        "resourceSliceCount": total,
                    },
                    **({"devices": chunk} if i < len(chunks) else {"sharedCounters": chunk}),
                },
            }
        )
    return out


class SlicePublisher:
    """Keeps the node's slices equal to what discovery found.

    :meth:`publish` is cheap when nothing changed (a digest comparison); pass ``force`` to
    re-read the server (slices someone deleted are written again). The generation continues
    from what the server holds, so a restarted agent never reuses a generation number.

    With ``cache`` (a watch of this node's slices of the driver) "re-read" reads the cache
    while it is synced, and what the publisher writes goes into it: a forced check of a node
    whose slices are as they should be sends no request.
    """

    def __init__(
        self,
        client: Client,
        node: str,
        *,
        max_per_slice: int = MAX_DEVICES_PER_SLICE,
        field_manager: str = FIELD_MANAGER,
        cache: WatchCache | None = None,
    ) -> None:
        self.client = client
        self.cache = cache
        self.node = node
        self.max_per_slice = max_per_slice
        self.field_manager = field_manager
        self.generation = 0
        self._digest: str | None = None
        self._node_uid: str | None = None
        #: What the API server keeps (probed before the first publish; :mod:`.features`).
        self.features: SliceFeatures | None = None
        #: Called with one message when the cluster cannot enforce what would be published.
        self.on_restricted: Callable[[str], None] = lambda message: None
        self._restricted = ""

    def _existing(self) -> list[ResourceSlice]:
        if self.cache is not None and self.cache.synced.is_set():
            return [cast(ResourceSlice, ResourceSlice.from_dict(d)) for d in self.cache.items()]
        return list(self.client.list(ResourceSlice, fields=slice_fields(self.node)))

    def _uid(self) -> str | None:
        if self._node_uid is None:
            try:
                node = self.client.get(Node, self.node)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                log.warning("node %s not found: slices get no owner reference", self.node)
                return None
            self._node_uid = node.metadata.uid if node.metadata else None
        return self._node_uid

    def publish(
        self,
        devices: Sequence[dict[str, Any]],
        *,
        force: bool = False,
        counter_sets: Sequence[dict[str, Any]] = (),
    ) -> bool:
        """Make the server's slices match ``devices`` (and the ``counter_sets`` they consume);
        True if anything was written."""
        devices, counter_sets = self._enforceable(devices, counter_sets)
        digest = devices_digest([*devices, *counter_sets])
        if digest == self._digest and not force:
            return False
        existing = self._existing()
        server_gen = max(
            (s.spec.pool.generation for s in existing if s.spec and s.spec.pool), default=0
        )
        desired_count = len(chunk_devices(devices, self.max_per_slice)) + len(
            chunk_counters(counter_sets)
        )
        if digest == self._digest and self._matches(existing, devices, desired_count):
            return False
        # Adopted only once every slice is written: a failed attempt must not push the next
        # one further ahead (the admission policy lets a slice's generation move forward by at
        # most GENERATION_STEP per write; a partial write is caught up by server_gen).
        generation = max(self.generation, server_gen) + 1
        desired = build_slices(
            self.node, self._uid(), devices, generation, self.max_per_slice, counter_sets
        )
        for obj in desired:
            written = self.client.apply(
                cast(ResourceSlice, ResourceSlice.from_dict(obj)),
                field_manager=self.field_manager,
                force=True,
            )
            if self.cache is not None:
                self.cache.observe(written)
        self.generation = generation
        wanted = {obj["metadata"]["name"] for obj in desired}
        for s in existing:
            name = s.metadata.name if s.metadata else None
            if name and name not in wanted:
                self._delete(name)
        self._digest = digest
        log.info(
            "published %d devices in %d slice(s), generation %d",
            len(devices),
            len(desired),
            self.generation,
        )
        return True

    def _enforceable(
        self, devices: Sequence[dict[str, Any]], counter_sets: Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Only what the API server keeps the fields of (refused once, loudly, otherwise)."""
        if self.features is None or self.features.unsure:
            # asked again while some answer is missing (an agent started during an outage)
            self.features = probe(self.client, self.node)
        if any(k in d for d in devices for k in BINDING_FIELDS):
            if self.features.binding is None:
                binding = probe_binding(self.client, self.node)
                self.features = replace(self.features, binding=binding)
                if binding is False:
                    log.warning(
                        "node %s: the API server drops bindingConditions "
                        "(DRADeviceBindingConditions off, or Kubernetes older than 1.36): "
                        "FPGAs are programmed at prepare",
                        self.node,
                    )
            if not self.features.binding:
                devices = without_binding(devices)
        dropped = self.features.dropped()
        if not dropped:
            return list(devices), list(counter_sets)
        kept, sets, left = restrict(devices, counter_sets, self.features)
        message = (
            f"node {self.node}: the API server drops the ResourceSlice fields of "
            f"{', '.join(dropped)} (feature gate off, or Kubernetes older than 1.36): kube-acc "
            "publishes no device the cluster would give twice or while drained"
        )
        if left:
            shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
            message += f"; left out: {shown}"
        if not self.features.consumable:
            message += "; memory-shared devices are published whole"
        if message != self._restricted:
            log.error("%s", message)
            self.on_restricted(message)
            self._restricted = message
        return kept, sets

    def _matches(
        self, existing: list[ResourceSlice], devices: Sequence[dict[str, Any]], count: int
    ) -> bool:
        """Does the server hold exactly our current slices (all of one generation)?"""
        if len(existing) != count:
            return False
        gens = {s.spec.pool.generation for s in existing if s.spec and s.spec.pool}
        if gens != {self.generation}:
            return False
        names = sorted(
            d.name for s in existing if s.spec and s.spec.devices for d in s.spec.devices
        )
        return names == sorted(str(d["name"]) for d in devices)

    def delete_all(self) -> None:
        """Remove every slice of this node's pool (the agent is leaving the node)."""
        for s in self._existing():
            if s.metadata and s.metadata.name:
                self._delete(s.metadata.name)
        self._digest = None

    def _delete(self, name: str) -> None:
        try:
            self.client.delete(ResourceSlice, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        if self.cache is not None:
            self.cache.forget(name)
