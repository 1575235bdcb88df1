"""The plugin's durable record of prepared claims.

Two files in the state directory:

* ``dra-checkpoint.json``: a snapshot of every prepared claim, with a checksum. It is replaced
  only by a complete, verified new one (temp file, every byte written and read back, fsync,
  rename, fsync of the directory);
* ``dra-journal.log``: one line per prepare/unprepare call since that snapshot, each with its own
  checksum, appended before the kubelet gets its answer; a prepare's line is flushed with one
  ``fsync`` (which flushes every line before it too), an unprepare's is not (below).

Why an unprepare needs no flush: a process killed outright (SIGKILL, OOM) keeps what it wrote in
the page cache, so the next agent reads the line either way. Only a power loss or kernel crash
can drop it, and then the node reboots: its pods restart and the CDI specs (on tmpfs) are gone.
What is lost is at most the unprepares since the last flush, so the claim is still recorded as
prepared; the kubelet, whose own checkpoint forgot it, will not unprepare it again. The agent
asks the API server at start which recorded claims are still in use
(:mod:`kubeacc.agent.dra.stale`) and unprepares the others. Losing a prepare instead would let a
running container's devices be given out again, so that line is flushed before the answer.

A journal line is ``{"sha":<hex>,"body":<call>}``: the call encoded once (msgspec, keys sorted,
no spaces) and ``sha`` the SHA-256 of exactly those bytes, so a call costs one encoding and one
hash (a decoded body encodes back to the same bytes, which is how a line is checked). Lines of
earlier versions (``{"sum":...}``: SHA-256 of ``json.dumps(body, sort_keys=True)``) are still
read. An agent older than this format reads the new lines as damaged, so a clean stop folds the
journal into the snapshot (whose format is unchanged): rolling back after a clean stop is safe.

Order of a change: journal line durable first, then the in-memory state, then (when the journal
has ``compact_after`` lines) a snapshot of that state. So the call that crosses the compaction
boundary is in the snapshot, and a failed snapshot only leaves a longer journal. A failed append
(disk full, read-only, I/O error) is cut off the journal again and the in-memory state is left
as it was: the caller answers the kubelet with an error and the kubelet retries.

Loading tolerates exactly what a crash can leave: a torn last journal line (its call was never
acknowledged), journal lines already folded into the snapshot (replaying them again gives the
same state), and after a power loss unflushed unprepare lines read back with NUL bytes where a
block never reached the disk (skipped: the claim stays prepared until the start-up check above
finds it unused), possibly followed by the one prepare line whose flush was under way (applied:
:func:`replay`). Anything else unreadable (a snapshot failing its checksum, a damaged line before
good ones) is :class:`StateError`: the agent refuses to start rather than forget claims.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from kubeacc.node.atomic import fsync_dir, write_all, write_atomic

log = logging.getLogger(__name__)
FILE_NAME = "dra-checkpoint.json"
JOURNAL_NAME = "dra-journal.log"
VERSION = 1


class StateError(Exception):
    """The state or CDI directory cannot be read or written: one line, for the operator."""


@dataclass(frozen=True)
class PreparedDevice:
    request_names: list[str]
    pool: str
    device: str
    cdi_device_ids: list[str]
    #: The allocation's shareID for a share of a memory-shared device (None: the whole device).
    share_id: str | None = None


@dataclass(frozen=True)
class PreparedClaim:
    namespace: str
    name: str
    devices: list[PreparedDevice]
    cdi_spec: dict[str, Any]
    #: Validated opaque configuration per device (e.g. the FPGA bitstream to program).
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreparedClaim:
        return cls(
            namespace=data["namespace"],
            name=data["name"],
            devices=[PreparedDevice(**d) for d in data["devices"]],
            cdi_spec=data["cdi_spec"],
            config=data.get("config", {}),
        )


#: The journal's encoding of a call: keys sorted, no spaces (one canonical form per value).
_ENCODE = msgspec.json.Encoder(order="sorted").encode


def _digest(data: Any) -> str:
    """The snapshot's checksum (and that of journal lines before the ``sha`` format)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def journal_line(body: Any) -> bytes:
    """One journal line for the call ``body`` (dataclasses allowed), newline included."""
    raw = _ENCODE(body)
    return b'{"sha":"' + hashlib.sha256(raw).hexdigest().encode() + b'","body":' + raw + b"}\n"


def _intact(entry: dict[str, Any]) -> bool:
    if "sha" in entry:
        return bool(entry["sha"] == hashlib.sha256(_ENCODE(entry["body"])).hexdigest())
    return bool(entry["sum"] == _digest(entry["body"]))


def parse_snapshot(data: bytes) -> dict[str, PreparedClaim]:
    """The claims of a snapshot file; ValueError if it is not complete and intact."""
    try:
        raw = json.loads(data)
        claims = raw["claims"]
        if raw.get("version") != VERSION:
            raise ValueError(f"version {raw.get('version')!r}, expected {VERSION}")
        if raw.get("checksum") != _digest(claims):
            raise ValueError("checksum mismatch")
        return {uid: PreparedClaim.from_dict(c) for uid, c in claims.items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed ({exc.__class__.__name__}: {exc})") from None


def replay(data: bytes, claims: dict[str, PreparedClaim]) -> tuple[int, int]:
    """Apply journal ``data`` to ``claims``; (calls replayed, length of the intact part).

    Only the last line may be damaged (a torn append), or lines holding NUL bytes where a power
    loss kept blocks of unflushed lines from the disk. Only unprepare lines go unflushed, and a
    prepare's flush writes every line before it, so after such a hole one prepare line can
    still be there: the last one, whose flush never returned (the call was never acknowledged).
    It is applied (the claim stays recorded, the safe side: the kubelet retries the call, or
    :mod:`kubeacc.agent.dra.stale` finds it unused at start). ValueError for a damaged line
    followed by intact ones, and for intact lines after a hole and such a prepare.
    """
    n = good = pos = 0
    damaged_at: int | None = None
    hole_at: int | None = None
    unacknowledged_at: int | None = None  # a prepare after a hole: the last call written
    for line in data.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        if b"\0" in line and line.endswith(b"\n"):
            hole_at = start if hole_at is None else hole_at
            continue
        try:
            if not line.endswith(b"\n"):
                raise ValueError("torn")
            entry = json.loads(line)
            if not _intact(entry):
                raise ValueError("checksum")
            body = entry["body"]
            flushed = body["op"] != "unprepare"
            _apply(body, claims)
        except (ValueError, KeyError, TypeError, AttributeError, msgspec.EncodeError):
            damaged_at = start if damaged_at is None else damaged_at
            continue
        if damaged_at is not None:
            raise ValueError(f"damaged line at byte {damaged_at} before intact ones")
        if unacknowledged_at is not None:
            raise ValueError(
                f"damaged line at byte {hole_at} before a flushed one (byte {unacknowledged_at})"
            )
        if hole_at is not None and flushed:
            unacknowledged_at = start
        n, good = n + 1, pos
    return n, good


def _apply(body: dict[str, Any], claims: dict[str, PreparedClaim]) -> None:
    op = body["op"]
    if op == "prepare":
        if "uid" in body:  # one claim per line (written by earlier versions)
            claims[body["uid"]] = PreparedClaim.from_dict(body["claim"])
        else:
            for uid, c in body["claims"].items():
                claims[uid] = PreparedClaim.from_dict(c)
    elif op == "unprepare":
        for uid in [body["uid"]] if "uid" in body else body["uids"]:
            claims.pop(uid, None)
    else:
        raise ValueError(f"unknown op {op!r}")


def _oneline(exc: OSError) -> str:
    return exc.strerror or str(exc)


class Checkpoint:
    """Prepared claims by UID; :meth:`record_prepare` is durable, :meth:`record_unprepare`
    survives a killed process (not a power loss: module docstring)."""

    def __init__(self, state_dir: Path, compact_after: int = 1000) -> None:
        self.dir = state_dir
        self.path = state_dir / FILE_NAME
        self.journal_path = state_dir / JOURNAL_NAME
        self.compact_after = max(1, compact_after)
        self.claims: dict[str, PreparedClaim] = {}
        self._journal_fd: int | None = None
        self._journal_size = 0  # bytes of intact journal
        self._journal_lines = 0
        self._journal_dirty = False  # a failed append could not be cut off yet

    # -- reading ----------------------------------------------------------------------------
    def load(self) -> None:
        """Snapshot plus journal, folded into a fresh snapshot; StateError if impossible."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            claims = self._read_snapshot()
            try:
                data = self.journal_path.read_bytes()
            except FileNotFoundError:
                data = b""
        except OSError as exc:
            raise StateError(f"state directory {self.dir}: {_oneline(exc)}") from None
        try:
            replay(data, claims)
        except ValueError as exc:
            raise StateError(
                f"journal {self.journal_path} is unreadable ({exc}); "
                "restore the state directory or remove it to start with no prepared claims"
            ) from None
        self.claims = claims
        try:
            self._open_journal()
            self.compact()
        except OSError as exc:
            raise StateError(
                f"state directory {self.dir} is not writable: {_oneline(exc)}"
            ) from None

    def _read_snapshot(self) -> dict[str, PreparedClaim]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            return parse_snapshot(data)
        except ValueError as exc:
            raise StateError(
                f"checkpoint {self.path} is unreadable ({exc}); "
                "restore it or remove it to start with no prepared claims"
            ) from None

    # -- writing ----------------------------------------------------------------------------
    def compact(self) -> None:
        """Replace the snapshot with the current state (verified), then empty the journal."""
        claims = {uid: asdict(c) for uid, c in sorted(self.claims.items())}
        doc = {"version": VERSION, "checksum": _digest(claims), "claims": claims}
        data = json.dumps(doc, separators=(",", ":")).encode()
        write_atomic(self.path, data, mode=0o600, verify=True)
        fd = self._fd()
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self._journal_size = self._journal_lines = 0

    def _open_journal(self) -> None:
        self.close()
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._journal_fd = fd
        self._journal_size = os.fstat(fd).st_size
        fsync_dir(self.dir)

    def _fd(self) -> int:
        if self._journal_fd is None:
            self._open_journal()
        assert self._journal_fd is not None
        return self._journal_fd

    def _append(self, body: dict[str, Any], *, durable: bool) -> None:
        """One journal line (flushed if ``durable``), or OSError with the journal as it was."""
        fd = self._fd()
        if self._journal_dirty:  # cut off what an earlier failed append left
            os.ftruncate(fd, self._journal_size)
            self._journal_dirty = False
        line = journal_line(body)
        try:
            write_all(fd, line)
            if durable:
                os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, self._journal_size)
            except OSError:
                self._journal_dirty = True
            raise
        self._journal_size += len(line)
        self._journal_lines += 1

    @property
    def compacts_next(self) -> bool:
        """The next journal line starts a compaction (a snapshot and its fsyncs)."""
        return self._journal_lines + 1 >= self.compact_after

    def _maybe_compact(self) -> None:
        if self._journal_lines < self.compact_after:
            return
        try:
            self.compact()
        except OSError as exc:  # the journal still holds everything; try again next time
            log.warning("checkpoint compaction failed (%s); journal kept", _oneline(exc))

    def record_prepare(self, claims: dict[str, PreparedClaim]) -> None:
        """Durably add claims (one flush for all of them), then apply them in memory."""
        self._append({"op": "prepare", "claims": claims}, durable=True)
        self.claims.update(claims)
        self._maybe_compact()

    def record_unprepare(self, uids: list[str]) -> None:
        """Remove claims (written, not flushed: module docstring), then forget them in memory."""
        self._append({"op": "unprepare", "uids": list(uids)}, durable=False)
        for uid in uids:
            self.claims.pop(uid, None)
        self._maybe_compact()

    def close(self) -> None:
        """Fold the journal into the snapshot (module docstring: roll-back), then close it."""
        if self._journal_fd is not None and self._journal_lines:
            try:
                self.compact()
            except OSError as exc:  # the journal still holds everything
                log.warning("compaction at stop failed (%s); journal kept", _oneline(exc))
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None


def read_claims(state_dir: Path) -> dict[str, dict[str, Any]]:
    """What a restarted plugin would load, read-only (snapshot plus journal): for tools/tests.

    ValueError if the state is unreadable.
    """
    try:
        claims = parse_snapshot((state_dir / FILE_NAME).read_bytes())
    except FileNotFoundError:
        claims = {}
    with contextlib.suppress(FileNotFoundError):
        replay((state_dir / JOURNAL_NAME).read_bytes(), claims)
    return {uid: asdict(c) for uid, c in claims.items()}
