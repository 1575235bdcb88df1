"""The plugin's durable record of prepared claims.

One JSON file, ``<state-dir>/dra-checkpoint.json``, replaced atomically (temp file, fsync,
rename, fsync of the directory) before the kubelet gets an answer. It holds everything needed to
answer a repeated prepare, to unprepare without the API server and to rebuild a CDI spec.
A checksum over the claims guards against a damaged file: such a file is moved aside and the
plugin starts empty (the kubelet re-prepares what it still needs).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.atomic import write_atomic

log = logging.getLogger(__name__)
FILE_NAME = "dra-checkpoint.json"
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


def _checksum(claims: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()


class Checkpoint:
    """Prepared claims by UID, mirrored to disk by :meth:`save`."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME
        self.claims: dict[str, PreparedClaim] = {}

    def load(self) -> None:
        try:
            raw = json.loads(self.path.read_bytes())
            claims = raw["claims"]
            if raw.get("version") != VERSION or raw.get("checksum") != _checksum(claims):
                raise ValueError("version or checksum mismatch")
            self.claims = {uid: PreparedClaim.from_dict(c) for uid, c in claims.items()}
        except FileNotFoundError:
            self.claims = {}
        except (ValueError, KeyError, TypeError) as exc:
            bad = self.path.with_suffix(".corrupt")
            self.path.replace(bad)
            log.error("checkpoint %s unreadable (%s); moved to %s", self.path, exc, bad)
            self.claims = {}

    def save(self) -> None:
        claims = {uid: asdict(c) for uid, c in sorted(self.claims.items())}
        doc = {"version": VERSION, "checksum": _checksum(claims), "claims": claims}
        write_atomic(self.path, json.dumps(doc, separators=(",", ":")).encode(), mode=0o600)
