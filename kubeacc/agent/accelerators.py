"""The node agent's part of its node's ``Accelerator`` objects: users and cordons.

The agent keeps ``status.allocatedTo`` true for every Accelerator of its node (who uses the
device, from :mod:`kubeacc.agent.users`), written by server-side apply under its own field
manager ``kubeacc-users-<node>``, so the life-cycle agent's status fields and this list never
fight. And it reads ``spec.cordoned``: a cordoned device gets a NoSchedule taint in the
ResourceSlice and is advertised Unhealthy through the device plugin (see the runner).

Both come from one watch of the node's Accelerators (label ``kubeacc.io/node``). The users are
recomputed when something wakes the loop (a claim prepared or unprepared, a claim's
``reservedFor`` changed, an Accelerator appeared) and every ``poll`` seconds (the kubelet's
pod-resources API has no watch); only lists that differ from the object are written. A failed
round (API server away or answering 429, kubelet away) is tried again after a backoff (1 s
doubling to :data:`RETRY_MAX`, with jitter), each time from the watch's current copies.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from lightkube import ApiError, Client
from lightkube.types import PatchType

from kubeacc.agent.users import Users
from kubeacc.contracts.names import CORDONED_BY_ANNOTATION
from kubeacc.crds.api import API_VERSION, NODE_LABEL
from kubeacc.crds.resources import Accelerator, is_not_found
from kubeacc.crds.watch import WatchCache, ignoring
from kubeacc.node.supervise import supervised

log = logging.getLogger(__name__)

#: Annotation the controller sets next to ``spec.cordoned``: who cordoned the device.
CORDONED_BY = CORDONED_BY_ANNOTATION
#: Longest pause between two failed writes of the users (seconds, before jitter).
RETRY_MAX = 30.0


def _key(consumers: list[dict[str, Any]]) -> str:
    return json.dumps(sorted(json.dumps(c, sort_keys=True) for c in consumers))


def _who(consumers: list[dict[str, str]]) -> str:
    if not consumers:
        return "nobody"
    return ", ".join(f"{c['kind']} {c.get('namespace', '')}/{c['name']}" for c in consumers)


class AcceleratorSync:
    def __init__(
        self,
        client: Client,
        node: str,
        users: Callable[[], Users],
        *,
        on_cordon: Callable[[], None] = lambda: None,
        poll: float = 30.0,
    ) -> None:
        self.client = client
        self.node = node
        self.users = users
        self.on_cordon = on_cordon
        self.poll = poll
        self.field_manager = f"kubeacc-users-{node}"
        self.cache = WatchCache(
            client,
            Accelerator,
            labels={NODE_LABEL: node},
            on_change=self._changed,
            wake_if=ignoring(("status", "lastSeen")),
            name=f"accelerator-watch-{node}",
        )
        self._cordoned: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.writes = 0

    # -- cordons ------------------------------------------------------------------------------
    def cordoned(self) -> dict[str, str]:
        """Device name -> who cordoned it, for the node's cordoned Accelerators."""
        with self._lock:
            return dict(self._cordoned)

    def _changed(self) -> None:
        cordoned = {
            (a.get("spec") or {}).get("deviceName", ""): (
                (a.get("metadata") or {}).get("annotations") or {}
            ).get(CORDONED_BY, "")
            for a in self.cache.items()
            if (a.get("spec") or {}).get("cordoned")
        }
        with self._lock:
            changed = cordoned != self._cordoned
            self._cordoned = cordoned
        if changed:
            log.info("cordoned devices: %s", ", ".join(sorted(cordoned)) or "none")
            self.on_cordon()
        self._wake.set()

    # -- users --------------------------------------------------------------------------------
    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self.cache.start()
        self._thread = supervised("accelerator-sync", self._loop, self._stop)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.cache.close()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self.cache.synced.is_set():
                continue  # the watch is (re)starting; it wakes us when it has listed
            try:
                self.sync_once()
                backoff = 0.0
            except Exception as exc:  # kubelet or API server away: keep what was written
                # 1 s doubling to RETRY_MAX, with jitter: a fleet of agents does not hammer an
                # API server that is busy (429) or just back, nor come back in lockstep
                backoff = min(max(backoff * 2, 1.0), RETRY_MAX)
                delay = backoff * random.uniform(1.0, 1.5)
                log.warning(
                    "updating the devices' users failed (%s); retrying in %.1f s", exc, delay
                )
                self._stop.wait(delay)
                self._wake.set()

    def sync_once(self) -> None:
        """Write ``status.allocatedTo`` where it differs from who uses the device now."""
        wanted = self.users()
        for acc in self.cache.items():
            name = acc["metadata"]["name"]
            device = (acc.get("spec") or {}).get("deviceName", "")
            want = wanted.get(device, [])
            have = (acc.get("status") or {}).get("allocatedTo") or []
            if _key(want) == _key(have):
                continue
            body = {
                "apiVersion": API_VERSION,
                "kind": "Accelerator",
                "metadata": {"name": name},
                "status": {"allocatedTo": want},
            }
            try:
                written = self.client.patch(
                    Accelerator.Status,
                    name,
                    body,
                    patch_type=PatchType.APPLY,
                    field_manager=self.field_manager,
                    force=True,
                )
            except ApiError as exc:
                if is_not_found(exc):
                    self.cache.forget(name)
                    continue
                raise
            self.cache.observe(written)
            self.writes += 1
            log.info("%s: used by %s", name, _who(want))
