"""The fault runner's workload: pods with a ResourceClaim each, created and deleted in an order a
seed fixes.

Each :meth:`Workload.step` either creates a claim of one of ``kinds`` (:data:`KINDS`) and a pod that
uses it (a ``plugin`` pod asks for the extended resource ``kubeacc.io/gpu`` instead: the device
plugin serves it on a node that advertises it, DRA elsewhere; an ``extender`` pod asks for a GPU
memory share that ``kubeacc extender`` places, tests/faults/extender.py), or deletes a live pod
(gracefully: the kubelet unprepares its claim before the pod is gone); a claim is deleted once its
pod is gone. API errors (an outage) are counted and the step is tried again later: the decisions
stay those of the seed, only their timing moves.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.core.resource import NamespacedResource
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.crds.opaque import fpga_claim_config
from tests.faults import extender
from tests.faults.nodes import BITSTREAM, DIGEST
from tests.faults.runtime import claim_pod, resource_pod
from tests.nodestack import claim, resource_claim

#: claim kind -> DeviceClass
CLASSES = {
    "gpu": "gpu.kubeacc.io",
    "share": "gpu.kubeacc.io",
    "mig": "mig.kubeacc.io",
    "nic": "nic.kubeacc.io",
    "xpu": "xpu.kubeacc.io",
    "fpga": "fpga.kubeacc.io",
}
#: A whole GPU: never a memory-shared one (that is the ``share`` kind's).
WHOLE = "!device.allowMultipleAllocations"
#: A NIC's SR-IOV virtual function.
VF = '"sriovVF" in device.attributes["kubeacc.io"]'
#: A share of a memory-shared GPU: 10 GB (9537 MiB, rounded up to whole MiB) and 10 % of its
#: cores; its CDI spec must carry these limits.
SHARE_MEMORY = "10G"
SHARE_MEMORY_MIB = 9537
SHARE_CORES = "10"
#: The extended resource of a ``plugin`` pod.
PLUGIN_RESOURCE = "kubeacc.io/gpu"
KINDS = (*CLASSES, "plugin", extender.KIND)

API_ERRORS = (ApiError, httpx2.HTTPError, OSError)


def kind_claim(kind: str, name: str, namespace: str) -> Any:
    """The ResourceClaim of one of the claim kinds."""
    if kind == "share":
        exactly = {
            "deviceClassName": CLASSES[kind],
            "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
            "capacity": {
                "requests": {"kubeacc.io/memory": SHARE_MEMORY, "kubeacc.io/cores": SHARE_CORES}
            },
        }
        return resource_claim(name, namespace, [{"name": "acc", "exactly": exactly}])
    if kind == "fpga":
        config = [fpga_claim_config(BITSTREAM, f"sha256:{DIGEST}", requests=("acc",))]
        request = {"name": "acc", "exactly": {"deviceClassName": CLASSES[kind]}}
        return resource_claim(name, namespace, [request], config)
    selector = {"gpu": WHOLE, "nic": VF}.get(kind)
    return claim(name, namespace, CLASSES[kind], selector)


@dataclass
class Workload:
    client: Client
    namespace: str
    rng: random.Random
    kinds: tuple[str, ...]
    #: at most this many pods at once
    max_live: int = 8
    live: list[str] = field(default_factory=list)
    #: pods deleted whose claims are still to delete
    dying: list[str] = field(default_factory=list)
    created: Counter[str] = field(default_factory=Counter)
    deleted: int = 0
    api_errors: int = 0
    _next: int = 0
    _pending: tuple[str, str] | None = None
    #: the kinds of the first creates: each kind once, in a seeded order
    _first: list[str] = field(default_factory=list)
    #: more work each step does (tests/faults/operations.py)
    also: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._first = list(self.kinds)
        self.rng.shuffle(self._first)

    def step(self) -> None:
        """One decision of the seed (or the retry of the last one that met an API error)."""
        self._reap()
        if self._pending is None:
            create = len(self.live) < self.max_live and (
                not self.live or bool(self._first) or self.rng.random() < 0.6
            )
            if create:
                self._next += 1
                kind = self._first.pop(0) if self._first else self.rng.choice(self.kinds)
                self._pending = ("create", f"w{self._next}-{kind}")
            else:
                self._pending = ("delete", self.rng.choice(sorted(self.live)))
        for more in self.also:
            more()
        action, name = self._pending
        try:
            if action == "create":
                self._create(name)
            else:
                self._delete(name)
        except API_ERRORS:
            self.api_errors += 1
            return
        self._pending = None

    def _create(self, name: str) -> None:
        kind = name.rsplit("-", 1)[1]
        if kind == "plugin":
            self._create_once(resource_pod(name, self.namespace, {PLUGIN_RESOURCE: "1"}))
        elif kind == extender.KIND:
            self._create_once(extender.pod(name, self.namespace))
        else:
            self._create_once(kind_claim(kind, name, self.namespace))
            self._create_once(claim_pod(name, self.namespace, name))
        self.live.append(name)
        self.created[kind] += 1

    def _create_once(self, obj: NamespacedResource) -> None:
        try:
            self.client.create(obj)
        except ApiError as exc:
            if exc.status.code != 409:  # created before an outage cut the answer off
                raise

    def _delete(self, name: str) -> None:
        try:
            self.client.delete(Pod, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        self.live.remove(name)
        self.dying.append(name)
        self.deleted += 1

    def _reap(self) -> None:
        """Delete the claims whose pods are gone."""
        try:
            pods = {
                p.metadata.name
                for p in self.client.list(Pod, namespace=self.namespace)
                if p.metadata is not None
            }
            for name in [n for n in self.dying if n not in pods]:
                try:
                    self.client.delete(ResourceClaim, name, namespace=self.namespace)
                except ApiError as exc:
                    if exc.status.code != 404:
                        raise
                self.dying.remove(name)
        except API_ERRORS:
            self.api_errors += 1

    def delete_all(self) -> None:
        """Delete every live pod (the end of a run), and what a create cut off by an API error
        left: its claim without its pod, or both without an answer."""
        if self._pending is not None and self._pending[0] == "create":
            self.live.append(self._pending[1])
            self._pending = None
        for name in list(self.live):
            self._delete(name)

    def drained(self) -> bool:
        """Every pod and claim gone."""
        self._reap()
        return not self.dying and not self.live and not self._objects()

    def _objects(self) -> list[Any]:
        return [
            *self.client.list(Pod, namespace=self.namespace),
            *self.client.list(ResourceClaim, namespace=self.namespace),
        ]
