"""Device status in the claim (``status.devices``, DRAResourceClaimDeviceStatus, GA in 1.37).

After NodePrepareResources each device of the claim that this driver prepared gets an entry
(driver, pool, device): the condition ``Ready`` (``Prepared``), ``data`` with what a user may
want to know about it (its PCI address; a GPU's ``uuid``; a MIG partition's instance ``uuid``,
the MIG device UUID the claim's containers see, with its GPU's as ``parentUUID`` and its
``migProfile``) and, for a NIC or a virtual function, ``networkData`` (interface name, hardware
address and, for a whole NIC only, its IPs: :mod:`kubeacc.agent.dra.netdata`). After
NodeUnprepareResources the entries go again.

Each write replaces this node's entries in ``status.devices`` by a JSON patch guarded by the
claim's ``resourceVersion`` (:mod:`kubeacc.agent.dra.claimpatch` says why not a server-side
apply), under the field manager ``kubeacc.io-<node>``: another driver's or pool's entries are
never touched, and an empty list removes ours. They run on a thread of their own so
that prepare and unprepare never wait for the API server: the status follows within moments, a
claim already gone is skipped, and a write that fails is tried again until it is written or a
newer write of the claim replaces it: after 1 s, doubling to :data:`MAX_RETRY_DELAY` (an API
server outage of minutes must not lose the status of the claims prepared meanwhile; the fault
runner found them lost after five tries). A failing write is logged at its fifth try and then
once a minute. Writes are
coalesced per claim (only its latest state is sent), so a burst of prepares and unprepares costs
at most one write per claim in flight. The writer keeps the server's answer to its last write of
each claim (:data:`KNOWN` claims at most): the next write of that claim starts from it (or from
the claim watch's copy where that is newer), so it needs no read, and a write whose entries are
already so there is not sent at all -- a claim prepared again before its unprepare's write went
out, or unprepared again after its entries were removed. A condition whose status does not
change keeps its ``lastTransitionTime`` (the API's convention for conditions), so preparing a
claim again does not count as a change.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube import Client

from kubeacc.agent.dra.checkpoint import PreparedDevice
from kubeacc.agent.dra.claimpatch import patch_devices
from kubeacc.agent.dra.claims import WatchingClaimSource
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.contracts.names import DRIVER_NAME

log = logging.getLogger(__name__)

#: The try at which a failing write is first logged (it is tried again still).
ATTEMPTS = 5
#: The longest wait between two tries of a failing write (seconds).
MAX_RETRY_DELAY = 30.0
#: A write still failing is logged again after this many seconds of tries.
LOG_EVERY = 60.0
#: Claims whose last answer from the server the writer keeps (the most recently written).
KNOWN = 256


@dataclass(frozen=True)
class _Write:
    namespace: str
    name: str
    uid: str
    devices: tuple[dict[str, Any], ...]  # empty: remove ours
    attempt: int = 0
    #: seconds of waits between its failed tries so far
    waited: float = 0.0
    #: the writer's sequence number of this state of the claim (a newer state: a larger one)
    seq: int = 0


def _stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: An interface's ``networkData`` (name, with or without its IPs): :func:`netdata.network_data`.
NetworkReader = Callable[[str, bool], dict[str, Any]]


def device_entries(
    pool: str,
    prepared: Iterable[PreparedDevice],
    infos: Mapping[str, DeviceInfo],
    migs: Mapping[str, str] | None = None,
    network: NetworkReader | None = None,
) -> list[dict[str, Any]]:
    """The ``status.devices`` entries of one prepared claim (one per device, or per share of a
    memory-shared device: the API server takes an entry only for an allocated device, and a
    share is allocated as the device and its ``shareID``); ``migs``: the MIG device UUID of
    each of its partition devices; ``network``: reads an interface's network data on the host
    (None: the interface name only)."""
    migs = migs or {}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    now = _stamp()
    for p in prepared:
        if (p.device, p.share_id or "") in out:
            continue
        info = infos.get(p.device)
        data: dict[str, str] = {}
        entry: dict[str, Any] = {
            "driver": DRIVER_NAME,
            "pool": p.pool or pool,
            "device": p.device,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Prepared",
                    "message": "prepared by kubeacc.io on its node",
                    "lastTransitionTime": now,
                }
            ],
        }
        if info is not None:
            if info.bus_id:
                data["pciBusID"] = info.bus_id
            if info.uuid:
                data["uuid"] = info.uuid
            if info.mig is not None:
                if mig_uuid := migs.get(p.device) or info.mig.fixed_uuid:
                    data["uuid"] = mig_uuid
                if info.mig.gpu_uuid:
                    data["parentUUID"] = info.mig.gpu_uuid
                data["migProfile"] = info.mig.profile
            if info.netdev:
                entry["networkData"] = (
                    network(info.netdev, not info.vf)
                    if network is not None
                    else {"interfaceName": info.netdev}
                )
        if data:
            entry["data"] = data
        if p.share_id:
            entry["shareID"] = p.share_id
        out[(p.device, p.share_id or "")] = entry
    return list(out.values())


def entry_key(entry: Mapping[str, Any]) -> tuple[str, str]:
    """An entry's device and share (``""``: the whole device)."""
    return str(entry.get("device")), str(entry.get("shareID") or "")


class DeviceStatusWriter:
    """Writes and removes claims' ``status.devices`` entries in the background, one claim's
    latest state at a time: a write still waiting is replaced by a newer one of the same claim,
    and a claim unprepared before its entries were written is not written at all."""

    def __init__(
        self,
        client: Client,
        node: str,
        retry_delay: float = 1.0,
        claims: WatchingClaimSource | None = None,
    ) -> None:
        self.client = client
        #: The agent's watch of its claims: a write starts from its copy (no GET first).
        self.claims = claims
        self.node = node
        self.field_manager = f"{DRIVER_NAME}-{node}"
        self.retry_delay = retry_delay
        #: Claim UID -> its write still to do (oldest first).
        self._pending: dict[str, _Write] = {}
        #: Claims whose entries are on the server now.
        self._written: set[str] = set()
        #: Claim UID -> the server's answer to our last write of it (oldest first).
        self._known: dict[str, dict[str, Any]] = {}
        #: Claim UID -> the sequence number of its latest state, while it is not written yet:
        #: a failed write's retry that a newer state overtook is dropped (never a stale write).
        self._latest: dict[str, int] = {}
        self._seq = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.written = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="device-status", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(5)

    def prepared(self, namespace: str, name: str, uid: str, entries: list[dict[str, Any]]) -> None:
        self._put(_Write(namespace, name, uid, tuple(entries)))

    def unprepared(self, namespace: str, name: str, uid: str) -> None:
        with self._cond:
            if uid not in self._written and self._pending.get(uid) is not None:
                del self._pending[uid]  # never written: nothing to remove
                self._latest.pop(uid, None)
                return
        self._put(_Write(namespace, name, uid, ()))

    def _put(self, w: _Write, *, retry: bool = False) -> None:
        with self._cond:
            if retry and (w.uid in self._pending or self._latest.get(w.uid) != w.seq):
                return  # a newer state of that claim is waiting or was written
            if not retry:
                self._seq += 1
                w = dataclasses.replace(w, seq=self._seq)
                self._latest[w.uid] = w.seq
            self._pending.pop(w.uid, None)
            self._pending[w.uid] = w
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                uid = next(iter(self._pending))
                w = self._pending.pop(uid)
            try:
                self.write(w.namespace, w.name, w.uid, list(w.devices))
            except Exception as exc:  # API server away: tried again until written or replaced
                delay = min(self.retry_delay * 2 ** min(w.attempt, 16), MAX_RETRY_DELAY)
                waited = w.waited + delay
                if w.attempt + 1 == ATTEMPTS or int(waited / LOG_EVERY) > int(w.waited / LOG_EVERY):
                    log.warning(
                        "status.devices of %s/%s not written yet (try %d, trying again): %s",
                        w.namespace, w.name, w.attempt + 1, exc,
                    )  # fmt: skip
                again = dataclasses.replace(w, attempt=w.attempt + 1, waited=waited)
                timer = threading.Timer(delay, self._put, args=(again,))
                timer.kwargs = {"retry": True}
                timer.daemon = True
                timer.start()
                continue
            with self._cond:
                if self._latest.get(uid) == w.seq:
                    del self._latest[uid]
                if w.devices:
                    self._written.add(uid)
                else:
                    self._written.discard(uid)

    def write(self, namespace: str, name: str, uid: str, devices: list[dict[str, Any]]) -> None:
        """Make ``devices`` this node's entries of the claim (its UID must match)."""

        def change(data: dict[str, Any]) -> list[dict[str, Any]] | None:
            if (data.get("metadata") or {}).get("uid") != uid:
                return None  # another claim of that name now
            entries = (data.get("status") or {}).get("devices") or []
            return with_node_entries(entries, self.node, devices)

        def seen(data: dict[str, Any]) -> None:
            if (data.get("metadata") or {}).get("uid") != uid:
                return
            self._known.pop(uid, None)
            self._known[uid] = data
            while len(self._known) > KNOWN:
                del self._known[next(iter(self._known))]

        cached = self.claims.cached(namespace, name, uid) if self.claims is not None else None
        known = self._known.get(uid)
        first, trusted = cached, False
        if known is not None and not _newer(cached, known):
            first, trusted = known, True
        if patch_devices(
            self.client, namespace, name, change, self.field_manager, first,
            trusted=trusted, seen=seen,
        ):  # fmt: skip
            self.written += 1


def _newer(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    """Is copy ``a`` of a claim newer than ``b``? Where the resourceVersions are not numbers
    (the API gives no order), ``a`` counts as newer: it is then confirmed by a read."""
    if a is None:
        return False
    va = str((a.get("metadata") or {}).get("resourceVersion", ""))
    vb = str((b.get("metadata") or {}).get("resourceVersion", ""))
    if va.isdigit() and vb.isdigit():
        return int(va) > int(vb)
    return va != vb


def with_node_entries(
    entries: list[dict[str, Any]], pool: str, devices: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``status.devices`` with this driver's entries of ``pool`` replaced by ``devices``. A
    device that stays keeps the conditions of types ``devices`` does not set (another writer's:
    the binding conditions), and the ``lastTransitionTime`` of a condition whose status stays
    the same; an entry of the pool not in ``devices`` goes (at unprepare, all of
    them); other drivers' and pools' entries stay as they are."""
    new = {entry_key(d): d for d in devices}
    out: list[dict[str, Any]] = []
    for e in entries:
        if (e.get("driver"), e.get("pool")) != (DRIVER_NAME, pool):
            out.append(e)
            continue
        d = new.pop(entry_key(e), None)
        if d is None:
            continue
        had = {c.get("type"): c for c in e.get("conditions") or []}
        ours = [_since(c, had.get(c.get("type"))) for c in d.get("conditions") or []]
        types = {c.get("type") for c in ours}
        kept = [c for c in had.values() if c.get("type") not in types]
        out.append({**d, "conditions": [*kept, *ours]})
    return [*out, *new.values()]


def _since(new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """Condition ``new``, with ``old``'s transition time where its status is the same."""
    if old is None or old.get("status") != new.get("status") or "lastTransitionTime" not in old:
        return new
    return {**new, "lastTransitionTime": old["lastTransitionTime"]}
