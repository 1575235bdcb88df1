"""A list-then-watch cache of one resource kind, fed by a background thread.

The controller and the life-cycle agent read the objects they act on from such caches instead
of listing them on every pass, and get a callback whenever something changed, so that they wake
up at once instead of polling.

* Start: one LIST; the cache is *replaced* by its items (so objects deleted while no watch ran
  do not linger), :attr:`WatchCache.synced` is set, and a WATCH follows from the list's
  resourceVersion: nothing that happens between the two is lost.
* A broken watch (API server away, connection reset, 410 Gone after a long outage) clears
  ``synced`` and starts over with a LIST, after a backoff with jitter (0.5 s doubling to
  ``max_backoff``; at least the ``Retry-After`` of a 429) so that a fleet of agents does not
  come back in lockstep and a busy API server gets the pause it asked for. A watch the server
  ends normally is resumed by lightkube from the last resourceVersion seen.
* Big kinds read for a few fields are cut down as they arrive (``keep``, on listed objects,
  watch events and :meth:`WatchCache.observe` alike) and listed in pages (``page``), so that
  neither the cache nor its LIST holds whole objects of the whole kind.
* Writers can put the object a write returned into the cache (:meth:`WatchCache.observe`), so a
  pass that runs before the watch delivers that write does not act on the old state. A watch
  event older than what the cache holds is then skipped: since Kubernetes 1.34 resourceVersions
  are documented to be comparable integers (KEP-5504); non-integer ones are taken as newer.

Each cache opens its own client connection for the watch, so that :meth:`WatchCache.close`
can end a watch that is blocked waiting for the next event.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx2
from lightkube import ALL_NS, Client
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.client import FieldSelector

from kubeacc.crds.resources import as_dict
from kubeacc.retryafter import retry_after

log = logging.getLogger(__name__)

Key = tuple[str, str]
#: Decides from (old, new) -- None for absent -- whether a change wakes a cache's owner.
WakeIf = Callable[[dict[str, Any] | None, dict[str, Any] | None], bool]


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


def _newer(candidate: dict[str, Any], cached: dict[str, Any] | None) -> bool:
    """Whether ``candidate`` is at least as new as ``cached`` (by resourceVersion)."""
    if cached is None:
        return True
    new = (candidate.get("metadata") or {}).get("resourceVersion") or ""
    old = (cached.get("metadata") or {}).get("resourceVersion") or ""
    if new.isdigit() and old.isdigit():
        return int(new) >= int(old)
    return True


def relist_delay(exc: BaseException, backoff: float) -> float:
    """Seconds before listing again after ``exc``: ``backoff`` with jitter, and never less
    than the ``Retry-After`` of a refusal (429 from a busy API server) plus jitter."""
    delay = backoff * random.uniform(0.5, 1.0)
    if isinstance(exc, httpx2.HTTPStatusError):
        wait = retry_after(exc.response)
        if wait is not None:
            delay = max(delay, wait * random.uniform(1.0, 1.5))
    return delay


class _InterruptibleTransport(httpx2.BaseTransport):
    """An HTTP transport whose open connections another thread can shut down.

    Closing an httpx client does not end a read that is blocked on a streaming response; shutting
    the socket down does. The socket comes from the response's ``network_stream`` extension.
    """

    def __init__(self, config: SingleConfig) -> None:
        assert config.user is not None, "kubeconfig without a user"
        self._inner = httpx2.HTTPTransport(
            verify=verify_cluster(config.cluster, config.user, config.abs_file)
        )
        self._streams: list[Any] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        stream = response.extensions.get("network_stream")
        if stream is not None:
            with self._lock:
                self._streams.append(stream)
        return response

    def interrupt(self) -> None:
        with self._lock:
            streams, self._streams = self._streams, []
        for stream in streams:
            sock = stream.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._inner.close()


class WatchCache:
    """The objects of one kind (optionally one namespace / label and field selector), kept
    current."""

    def __init__(
        self,
        client: Client,
        resource: type[Any],
        *,
        namespaced: bool = False,
        labels: dict[str, str | None] | None = None,
        fields: FieldSelector | None = None,
        on_change: Callable[[], None] | None = None,
        wake_if: WakeIf | None = None,
        name: str = "watch",
        max_backoff: float = 10.0,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        page: int | None = None,
    ) -> None:
        self._config = client.config
        #: What of each object is held (its metadata name, namespace and resourceVersion must
        #: stay); default all. Big objects read for a few fields (ResourceSlices) are cut down.
        self._keep = keep or (lambda obj: obj)
        #: LIST in pages of this many objects (None: one request). With ``keep``, only one
        #: page of whole objects is in memory at a time, not the whole kind.
        self._page = page
        self.resource = resource
        self._namespace = ALL_NS if namespaced else None
        self._labels = labels
        self._fields = fields
        self._on_change = on_change or (lambda: None)
        #: Which events call ``on_change``: given (old, new), None for absent; default all.
        #: Runs under the cache's lock (see :meth:`_apply`).
        self._wake_if = wake_if or (lambda old, new: True)
        self.name = name
        self.max_backoff = max_backoff
        self._items: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        #: Set while the cache holds a complete list followed by an unbroken watch.
        self.synced = threading.Event()
        #: How many times the cache was (re)filled by a LIST (1 after the first sync).
        self.lists = 0
        self._closed = threading.Event()
        self._listed_ok = False
        self._transport: _InterruptibleTransport | None = None
        self._thread: threading.Thread | None = None

    # -- reading --------------------------------------------------------------------------
    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def by_name(self) -> dict[str, dict[str, Any]]:
        """Cluster-scoped kinds: the objects by name."""
        with self._lock:
            return {name: obj for (_, name), obj in self._items.items()}

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            return self._items.get((namespace, name))

    # -- writers' view ----------------------------------------------------------------------
    def observe(self, obj: Any) -> None:
        """Put an object a write returned into the cache (unless the cache has a newer one)."""
        data = self._keep(as_dict(obj))
        key = object_key(data)
        with self._lock:
            if _newer(data, self._items.get(key)):
                self._items[key] = data

    def forget(self, name: str, namespace: str = "") -> None:
        with self._lock:
            self._items.pop((namespace, name), None)

    # -- thread -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the watch thread (closing its connection ends a blocked watch)."""
        self._closed.set()
        with self._lock:
            transport = self._transport
        if transport is not None:
            transport.interrupt()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.5
        while not self._closed.is_set():
            transport = _InterruptibleTransport(self._config)
            client = Client(self._config, transport=transport)
            with self._lock:
                self._transport = transport
            if self._closed.is_set():  # close() ran before the transport was published
                client.close()
                return
            try:
                self._list_and_watch(client)
            except Exception as exc:
                if self._closed.is_set():
                    return
                self.synced.clear()
                if self._listed_ok:  # the LIST worked, the watch broke later: start over
                    backoff = 0.5
                delay = relist_delay(exc, backoff)
                log.warning(
                    "%s: watch of %s ended (%s); listing again in %.1f s",
                    self.name,
                    self.resource.__name__,
                    exc,
                    delay,
                )
                self._closed.wait(delay)
                backoff = min(backoff * 2, self.max_backoff)
            finally:
                with self._lock:
                    self._transport = None
                client.close()

    def _list_and_watch(self, client: Client) -> None:
        kw: dict[str, Any] = {"labels": self._labels, "fields": self._fields}
        if self._namespace is not None:
            kw["namespace"] = self._namespace
        self._listed_ok = False
        listing = client.list(self.resource, chunk_size=self._page, **kw)
        fresh = {object_key(d): d for d in (self._keep(as_dict(o)) for o in listing)}
        version = listing.resourceVersion
        with self._lock:
            self._items = fresh
        self.lists += 1
        self._listed_ok = True
        self.synced.set()
        self._on_change()
        for event, obj in client.watch(self.resource, resource_version=version, **kw):
            if self._closed.is_set():
                return
            if self._apply(event, self._keep(as_dict(obj))):
                self._on_change()
        # lightkube only returns from a watch when told to stop; treat it as broken.
        raise ConnectionError("watch stream ended")

    def _apply(self, event: str, data: dict[str, Any]) -> bool:
        """Apply one watch event; returns whether it should wake the owner.

        ``wake_if`` runs under the cache's lock, so no reader sees the event in the cache
        before an owner that keeps state in ``wake_if`` (the extender) has taken it in; it must
        therefore not read the cache itself."""
        key = object_key(data)
        with self._lock:
            old = self._items.get(key)
            if event == "DELETED":
                self._items.pop(key, None)
                return self._wake_if(old, None)
            if not _newer(data, old):
                return False
            self._items[key] = data
            return self._wake_if(old, data)


def _without(obj: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """``obj`` without the field at ``path`` (a shallow copy where it changes)."""
    head, rest = path[0], path[1:]
    if head not in obj:
        return obj
    out = dict(obj)
    if not rest:
        del out[head]
    elif isinstance(obj[head], dict):
        out[head] = _without(obj[head], rest)
    return out


def ignoring(*paths: tuple[str, ...]) -> WakeIf:
    """A ``wake_if`` that ignores changes only in ``paths`` (and in resourceVersion and
    managedFields): e.g. the ``status.lastSeen`` an agent's periodic resync refreshes."""
    skip = (("metadata", "resourceVersion"), ("metadata", "managedFields"), *paths)

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        for path in skip:
            obj = _without(obj, path)
        return obj

    def wake(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
        if old is None or new is None:
            return True
        return strip(old) != strip(new)

    return wake


def membership(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """A ``wake_if`` for caches that only need to know which objects exist."""
    return old is None or new is None
