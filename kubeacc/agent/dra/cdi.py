"""CDI specs, one JSON file per prepared claim.

Kind ``kubeacc.io/claim``; each allocated device is a CDI device named ``<claim-uid>-<device>``,
so the fully-qualified id the kubelet hands the runtime is
``kubeacc.io/claim=<claim-uid>-<device>``. Claim-wide edits (``ACCELERATOR_UNITS``, the claim's
name) sit in the spec's top-level ``containerEdits``, which a runtime applies whenever it injects
any device of the spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.atomic import remove_durable, write_atomic

CDI_VERSION = "0.6.0"
CDI_KIND = "kubeacc.io/claim"
SPEC_PREFIX = "kubeacc.io-claim_"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
_SPEC_RE = re.compile(r"^kubeacc\.io-claim_(?P<uid>[A-Za-z0-9-]+)\.json$")


@dataclass(frozen=True)
class CDIDevice:
    """One device of a claim as the container should see it."""

    name: str  # slice device name
    bus_id: str
    device_nodes: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def device_id(claim_uid: str, device: str) -> str:
    """The fully-qualified CDI device id for ``device`` of the claim."""
    return f"{CDI_KIND}={claim_uid}-{device}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{SPEC_PREFIX}{claim_uid}.json"


def build_spec(
    claim_uid: str,
    claim_ref: str,
    devices: Sequence[CDIDevice],
    host_root: Path = Path("/"),
) -> dict[str, Any]:
    units = ",".join(d.bus_id for d in devices if d.bus_id)
    cdi_devices = []
    for d in devices:
        edits: dict[str, Any] = {}
        if d.device_nodes:
            edits["deviceNodes"] = [device_node(p, host_root) for p in d.device_nodes]
        env = [f"KUBEACC_DEVICE_{_env_suffix(d.name)}={d.bus_id}"]
        env += [f"{k}={v}" for k, v in sorted(d.env.items())]
        edits["env"] = env
        cdi_devices.append({"name": f"{claim_uid}-{d.name}", "containerEdits": edits})
    return {
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": cdi_devices,
        "containerEdits": {
            "env": [f"ACCELERATOR_UNITS={units}", f"KUBEACC_CLAIM={claim_ref}"],
        },
    }


def _env_suffix(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def device_node(path: str, host_root: Path) -> dict[str, str]:
    """A CDI device node; on a synthetic host root the file lives under the root."""
    entry = {"path": path}
    if host_root != Path("/"):
        entry["hostPath"] = str(host_root / path.lstrip("/"))
    return entry


def write_spec(cdi_dir: Path, claim_uid: str, spec: Mapping[str, Any]) -> Path:
    """Write the spec atomically (a reader never sees half a file).

    Not flushed to the disk: a spec is derived data. The checkpoint is the durable record and
    the plugin rewrites any missing or different spec from it when it starts (and the usual
    CDI directory, /var/run/cdi, is a tmpfs that does not outlive a reboot anyway).
    """
    path = spec_path(cdi_dir, claim_uid)
    write_atomic(path, json.dumps(spec, indent=1, sort_keys=True).encode(), durable=False)
    return path


def remove_spec(cdi_dir: Path, claim_uid: str) -> bool:
    return remove_durable(spec_path(cdi_dir, claim_uid), durable=False)


def spec_uids(cdi_dir: Path) -> set[str]:
    """Claim UIDs of every spec this driver has in ``cdi_dir``."""
    out = set()
    if cdi_dir.is_dir():
        for p in cdi_dir.iterdir():
            m = _SPEC_RE.match(p.name)
            if m:
                out.add(m.group("uid"))
    return out
