"""What the kubelet asked the container runtime for, as recorded by the testbed's fake CRI.

fake-cri writes every CreateContainerRequest as protobuf JSON (field names as in the CRI
``api.proto``; ``bytes`` fields such as env values are base64). :class:`ContainerRecord` is the
decoded view tests use.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DeviceMapping:
    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    readonly: bool


@dataclass(frozen=True)
class ContainerRecord:
    """One CreateContainer call."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    attempt: int
    envs: dict[str, str]
    devices: tuple[DeviceMapping, ...]
    cdi_devices: tuple[str, ...]
    mounts: tuple[Mount, ...]
    annotations: dict[str, str]
    labels: dict[str, str]
    raw: dict[str, Any]

    @classmethod
    def from_request(cls, req: dict[str, Any]) -> ContainerRecord:
        cfg = req.get("config", {})
        meta = req.get("sandboxConfig", {}).get("metadata", {})
        envs = {}
        for kv in cfg.get("envs", []):
            # KeyValue.value is a bytes field in the pinned CRI: base64 in protobuf JSON.
            envs[kv["key"]] = base64.b64decode(kv.get("value", "")).decode(errors="replace")
        return cls(
            namespace=meta.get("namespace", ""),
            pod=meta.get("name", ""),
            pod_uid=meta.get("uid", ""),
            container=cfg.get("metadata", {}).get("name", ""),
            attempt=int(cfg.get("metadata", {}).get("attempt", 0)),
            envs=envs,
            devices=tuple(
                DeviceMapping(
                    d.get("containerPath", ""), d.get("hostPath", ""), d.get("permissions", "")
                )
                for d in cfg.get("devices", [])
            ),
            cdi_devices=tuple(d.get("name", "") for d in cfg.get("CDIDevices", [])),
            mounts=tuple(
                Mount(m.get("containerPath", ""), m.get("hostPath", ""), bool(m.get("readonly")))
                for m in cfg.get("mounts", [])
            ),
            annotations=dict(cfg.get("annotations", {})),
            labels=dict(cfg.get("labels", {})),
            raw=req,
        )


def read_records(directory: Path) -> list[ContainerRecord]:
    """Every record in ``directory``, in the order the kubelet made the calls."""
    files = sorted(directory.glob("*.json"), key=lambda p: p.stem.rsplit("_", 1)[-1])
    return [ContainerRecord.from_request(json.loads(p.read_text())) for p in files]
