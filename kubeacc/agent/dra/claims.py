"""Where the plugin reads ResourceClaims.

:class:`ApiClaimSource` does one GET per claim. :class:`WatchingClaimSource` keeps a cache of
the claims allocated from this node's pool, fed by a watch, so that a prepare usually needs no
round trip to the API server; it falls back to a GET whenever the cache does not hold the claim
with the UID the kubelet named (not yet seen, or deleted and re-created), so the cache can make
a prepare faster but never answer it from stale data. A broken watch (API server away) empties
the cache; the next watch lists every claim again before it follows changes.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from lightkube import ALL_NS, ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.agent.dra import DRIVER_NAME

log = logging.getLogger(__name__)


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The claim as API JSON (camelCase), or None if it does not exist."""


class ApiClaimSource:
    """Reads each claim from the API server (always current; one GET per claim)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        try:
            obj = self.client.get(ResourceClaim, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        return obj.to_dict()


def allocated_here(claim: dict[str, Any], pool: str) -> bool:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    return any(r.get("driver") == DRIVER_NAME and r.get("pool") == pool for r in results)


class WatchingClaimSource(ApiClaimSource):
    """A watch-fed cache of the claims allocated from ``pool``, with GET as the fallback."""

    def __init__(self, client: Client, pool: str) -> None:
        super().__init__(client)
        self.pool = pool
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim-watch", daemon=True)
        self.hits = 0
        self.misses = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        with self._lock:
            cached = self._cache.get((namespace, name))
        if cached is not None and cached.get("metadata", {}).get("uid") == uid:
            self.hits += 1
            return cached
        self.misses += 1
        return super().get(namespace, name, uid)

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                for event, obj in self.client.watch(ResourceClaim, namespace=ALL_NS):
                    if self._stop.is_set():
                        return
                    meta = obj.metadata
                    if meta is None or meta.name is None or meta.namespace is None:
                        continue
                    key = (meta.namespace, meta.name)
                    data = obj.to_dict()
                    with self._lock:
                        if event != "DELETED" and allocated_here(data, self.pool):
                            self._cache[key] = data
                        else:
                            self._cache.pop(key, None)
                    backoff = 1.0
            except Exception as exc:
                if self._stop.is_set():
                    return
                # What changed while the watch was down is unknown: until the next watch has
                # listed the claims again, every prepare reads its claim from the API server.
                with self._lock:
                    self._cache.clear()
                log.warning("claim watch ended (%s); restarting in %.0f s", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
