"""The fault runner's workload: pods with a ResourceClaim each, created and deleted in an order a
seed fixes.

Each :meth:`Workload.step` either creates a claim of one of ``kinds`` (a DeviceClass each) and a
pod that uses it, or deletes a live pod (gracefully: the kubelet unprepares its claim before the
pod is gone); a claim is deleted once its pod is gone. API errors (an outage) are counted and
the step is tried again later: the decisions stay those of the seed, only their timing moves.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from tests.nodestack import claim, claim_pod

#: claim kind -> DeviceClass
CLASSES = {
    "gpu": "gpu.kubeacc.io",
    "mig": "mig.kubeacc.io",
    "xpu": "xpu.kubeacc.io",
}

API_ERRORS = (ApiError, httpx2.HTTPError, OSError)


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

    def step(self) -> None:
        """One decision of the seed (or the retry of the last one that met an API error)."""
        self._reap()
        if self._pending is None:
            create = len(self.live) < self.max_live and (not self.live or self.rng.random() < 0.6)
            if create:
                self._next += 1
                kind = self.rng.choice(self.kinds)
                self._pending = ("create", f"w{self._next}-{kind}")
            else:
                self._pending = ("delete", self.rng.choice(sorted(self.live)))
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
        try:
            self.client.create(claim(name, self.namespace, CLASSES[kind]))
        except ApiError as exc:
            if exc.status.code != 409:  # created before an outage cut the answer off
                raise
        try:
            self.client.create(claim_pod(name, self.namespace, name))
        except ApiError as exc:
            if exc.status.code != 409:
                raise
        self.live.append(name)
        self.created[kind] += 1

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
        """Delete every live pod (the end of a run)."""
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
