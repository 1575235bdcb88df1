"""The plugin's durable record of prepared claims.

Two files in the state directory:

* ``dra-checkpoint.json``: a snapshot of every prepared claim, replaced atomically (temp file,
  fsync, rename, fsync of the directory), with a checksum;
* ``dra-journal.log``: one line per change since that snapshot (``prepare`` with the whole
  claim record, or ``unprepare``), each appended and flushed with one ``fsync`` before the
  kubelet gets its answer. Every line carries its own checksum; a torn last line (a crash in the
  middle of an append) is ignored, which is right because that change was never acknowledged.

One flush per prepare/unprepare keeps the durable write at the disk's single-flush latency.
The journal is folded into a new snapshot when the agent starts and whenever it grows past
``compact_after`` lines. A snapshot that fails its checksum is moved aside and the plugin
starts empty (the kubelet prepares again whatever it still needs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.atomic import fsync_dir, write_atomic

log = logging.getLogger(__name__)
FILE_NAME = "dra-checkpoint.json"
JOURNAL_NAME = "dra-journal.log"
VERSION = 1


@dataclass(frozen=True)
class PreparedDevice:
    request_names: list[str]
    pool: str
    device: str
    cdi_device_ids: list[str]


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


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class Checkpoint:
    """Prepared claims by UID; :meth:`record_prepare` / :meth:`record_unprepare` are durable."""

    def __init__(self, state_dir: Path, compact_after: int = 1000) -> None:
        self.path = state_dir / FILE_NAME
        self.journal_path = state_dir / JOURNAL_NAME
        self.compact_after = compact_after
        self.claims: dict[str, PreparedClaim] = {}
        self._journal_fd: int | None = None
        self._journal_lines = 0

    # -- reading ----------------------------------------------------------------------------
    def load(self) -> None:
        """Snapshot plus journal; then fold both into a fresh snapshot."""
        self.claims = self._load_snapshot()
        replayed = self._replay()
        if replayed or not self.path.exists():
            self.compact()
        else:
            self._open_journal(truncate=True)

    def _load_snapshot(self) -> dict[str, PreparedClaim]:
        try:
            raw = json.loads(self.path.read_bytes())
            claims = raw["claims"]
            if raw.get("version") != VERSION or raw.get("checksum") != _digest(claims):
                raise ValueError("version or checksum mismatch")
            return {uid: PreparedClaim.from_dict(c) for uid, c in claims.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as exc:
            bad = self.path.with_suffix(".corrupt")
            self.path.replace(bad)
            log.error("checkpoint %s unreadable (%s); moved to %s", self.path, exc, bad)
            return {}

    def _replay(self) -> int:
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return 0
        n = 0
        for line in data.split(b"\n"):
            if not line:
                continue
            try:
                entry = json.loads(line)
                body = entry["body"]
                if entry["sum"] != _digest(body):
                    raise ValueError("checksum")
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a torn or damaged journal line")
                continue
            if body["op"] == "prepare":
                self.claims[body["uid"]] = PreparedClaim.from_dict(body["claim"])
            elif body["op"] == "unprepare":
                self.claims.pop(body["uid"], None)
            n += 1
        return n

    # -- writing ----------------------------------------------------------------------------
    def compact(self) -> None:
        """Write the snapshot durably, then start an empty journal."""
        claims = {uid: asdict(c) for uid, c in sorted(self.claims.items())}
        doc = {"version": VERSION, "checksum": _digest(claims), "claims": claims}
        write_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode(), mode=0o600)
        self._open_journal(truncate=True)

    def _open_journal(self, truncate: bool) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self._journal_fd = os.open(self.journal_path, flags, 0o600)
        os.fsync(self._journal_fd)
        fsync_dir(self.journal_path.parent)
        self._journal_lines = 0

    def _append(self, bodies: list[dict[str, Any]]) -> None:
        if self._journal_fd is None:
            self._open_journal(truncate=False)
        assert self._journal_fd is not None
        data = b"".join(
            json.dumps({"sum": _digest(b), "body": b}, separators=(",", ":")).encode() + b"\n"
            for b in bodies
        )
        os.write(self._journal_fd, data)
        os.fsync(self._journal_fd)
        self._journal_lines += len(bodies)
        if self._journal_lines >= self.compact_after:
            self.compact()

    def record_prepare(self, claims: dict[str, PreparedClaim]) -> None:
        """Durably add claims (one flush for all of them)."""
        self._append(
            [{"op": "prepare", "uid": uid, "claim": asdict(c)} for uid, c in claims.items()]
        )
        self.claims.update(claims)

    def record_unprepare(self, uids: list[str]) -> None:
        self._append([{"op": "unprepare", "uid": uid} for uid in uids])
        for uid in uids:
            self.claims.pop(uid, None)

    def close(self) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None


def read_claims(state_dir: Path) -> dict[str, dict[str, Any]]:
    """What a restarted plugin would load, read-only (snapshot plus journal): for tools/tests."""
    cp = Checkpoint(state_dir)
    try:
        raw = json.loads(cp.path.read_bytes())
        cp.claims = {uid: PreparedClaim.from_dict(c) for uid, c in raw["claims"].items()}
    except FileNotFoundError:
        cp.claims = {}
    cp._replay()
    return {uid: asdict(c) for uid, c in cp.claims.items()}
