"""Where the plugin reads ResourceClaims.

:class:`ApiClaimSource` does one GET per claim, with the deadline of its client (the agent
gives it :data:`READ_TIMEOUT_S`). :class:`WatchingClaimSource` keeps a cache of
the claims allocated from this node's pool, fed by a watch, so that a prepare usually needs no
round trip to the API server; it falls back to a GET whenever the cache does not hold the claim
with the UID the kubelet named (not yet seen, or deleted and re-created), so the cache can make
a prepare faster but never answer it from stale data. A broken watch (API server away) empties
the cache; the next watch lists every claim again before it follows changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from lightkube import ALL_NS, ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.contracts.names import DRIVER_NAME

log = logging.getLogger(__name__)

#: Deadline of one claim read (connect, and each read of the answer).
READ_TIMEOUT_S = 5.0


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The claim as API JSON (camelCase), or None if it does not exist."""


class ApiClaimSource:
    """Reads each claim from the API server (always current; one GET per claim)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        if not (namespace and name):  # an empty name would make the GET a LIST
            raise ValueError(f"no claim to read: namespace {namespace!r}, name {name!r}")
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

    def __init__(
        self, client: Client, pool: str, on_change: Callable[[], None] | None = None
    ) -> None:
        super().__init__(client)
        self.pool = pool
        #: Called when a claim allocated from ``pool`` changed (e.g. its ``reservedFor``); not
        #: for a change of its ``status.devices`` alone (the device-status writes of the agent).
        self.on_change = on_change
        #: Called with each claim allocated from ``pool`` as the watch delivers it (listed
        #: again after every restart of the watch), e.g. kubeacc.agent.dra.fpga.binding.
        self.observers: list[Callable[[dict[str, Any]], None]] = []
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

    def cached(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The claim as the watch last delivered it (no API call), or None."""
        with self._lock:
            cached = self._cache.get((namespace, name))
        return cached if cached is not None and cached["metadata"].get("uid") == uid else None

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
                    here = event != "DELETED" and allocated_here(data, self.pool)
                    with self._lock:
                        if here:
                            before = self._cache.get(key)
                            self._cache[key] = data
                            ours = before is None or not _same_beyond_status(before, data)
                        else:
                            ours = self._cache.pop(key, None) is not None
                    if ours and self.on_change is not None:
                        self.on_change()
                    if here:
                        for observe in self.observers:
                            observe(data)
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


def _same_beyond_status(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Are two versions of a claim the same but for ``status.devices`` (and the bookkeeping
    each write changes: resourceVersion, managedFields)? Compared in place: this runs on every
    watch event."""
    return (
        _same_but(a.get("metadata") or {}, b.get("metadata") or {}, _BOOKKEEPING)
        and _same_but(a.get("status") or {}, b.get("status") or {}, _DEVICES)
        and _same_but(a, b, _PARTS)
    )


def _same_but(a: dict[str, Any], b: dict[str, Any], skip: frozenset[str]) -> bool:
    kept = 0
    for k, v in a.items():
        if k in skip:
            continue
        kept += 1
        if k not in b or b[k] != v:
            return False
    return kept == sum(1 for k in b if k not in skip)


_BOOKKEEPING = frozenset({"resourceVersion", "managedFields"})
_DEVICES = frozenset({"devices"})
_PARTS = frozenset({"metadata", "status"})
