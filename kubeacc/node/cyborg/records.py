"""What kube-acc has asked of Cyborg and Placement for each claim, on disk before it is asked.

One file per claim, ``<state-dir>/cyborg/<claim-uid>.json``, replaced whole and flushed (file and
directory) before the request it announces is sent: a record in phase ``preparing`` is written
before the first ARQ or allocation is made, the ARQs' UUIDs are added as Cyborg returns them,
``prepared`` once every ARQ is bound, ``releasing`` before the first unbind. A record that is not
``prepared`` for a claim the checkpoint holds is undone at start (and retried until Cyborg
answers); the ARQ made just before a crash, whose UUID never reached the record, is found by its
device profile, which is this node's own (:func:`profile_name`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import msgspec

from kubeacc.node.atomic import fsync_dir, write_atomic

PREPARING = "preparing"
PREPARED = "prepared"
RELEASING = "releasing"
#: Every device profile kube-acc makes starts so, then the node's name.
PROFILE_PREFIX = "kubeacc-"


def profile_name(node: str, rp_uuid: str) -> str:
    """The device profile of this node's ARQs on one resource provider (a deployable).

    Cyborg takes only letters, digits, ``-`` and ``_`` in a profile's name: a node name's dots
    become ``_``, which a node name never has, so two nodes never share a profile."""
    return f"{PROFILE_PREFIX}{node.replace('.', '_')}-{rp_uuid[:8]}"


def is_own_profile(name: str, node: str) -> bool:
    head = f"{PROFILE_PREFIX}{node.replace('.', '_')}-"
    return name.startswith(head) and len(name) == len(head) + 8


class Arq(msgspec.Struct, frozen=True):
    uuid: str
    #: the resource provider (deployable) it is bound on
    rp: str
    #: the published device it stands for
    device: str


class ClaimRecord(msgspec.Struct, kw_only=True):
    uid: str
    namespace: str
    name: str
    phase: str = PREPARING
    #: published device name -> the resource provider (deployable) it is a slot of
    devices: dict[str, str] = msgspec.field(default_factory=dict)
    #: resource provider -> the resource class its slots are counted in
    classes: dict[str, str] = msgspec.field(default_factory=dict)
    arqs: list[Arq] = msgspec.field(default_factory=list)
    #: the attach handles of the bound ARQs (ARQ UUID -> Cyborg's attach_handle_info)
    handles: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)


class Records:
    """The claim records of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "cyborg"

    def _path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid.startswith("."):
            raise ValueError(f"not a claim UID: {uid!r}")
        return self.dir / f"{uid}.json"

    def write(self, rec: ClaimRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self._path(rec.uid), msgspec.json.encode(rec), 0o600, durable=True)

    def read(self, uid: str) -> ClaimRecord | None:
        try:
            data = self._path(uid).read_bytes()
        except FileNotFoundError:
            return None
        return msgspec.json.decode(data, type=ClaimRecord)

    def remove(self, uid: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(uid).unlink()
            fsync_dir(self.dir)

    def all(self) -> list[ClaimRecord]:
        """Every record; one that does not decode (a torn disk) is skipped, named in the log by
        the caller's reconcile through its absence."""
        out = []
        for path in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
                out.append(msgspec.json.decode(path.read_bytes(), type=ClaimRecord))
        return out
