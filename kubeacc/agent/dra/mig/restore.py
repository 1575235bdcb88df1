"""A prepared claim whose MIG instance was made again (after a node reboot or a GPU reset:
:meth:`kubeacc.agent.dra.mig.prepare.MigPartitions.restore`): its CDI spec rewritten to name the
new instance.

A new instance has a new MIG UUID and new ids, so new capability device nodes. The spec names
the UUID in environment values (``NVIDIA_VISIBLE_DEVICES`` of every NVIDIA device of the claim)
and the nodes in the partition's own CDI device; both are replaced, nothing else changes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.mig.prepare import Restored
from kubeacc.node import cdi

CAPS = "/dev/nvidia-caps/"


def rewritten(
    claim: PreparedClaim, uid: str, made: Iterable[Restored], device_root: Path
) -> PreparedClaim:
    """``claim`` with its spec naming the instances of ``made`` (all of claim ``uid``)."""
    spec: dict[str, Any] = copy.deepcopy(claim.cdi_spec)
    for r in made:
        for edits in _all_edits(spec):
            if "env" in edits:
                edits["env"] = [e.replace(r.old_uuid, r.uuid) for e in edits["env"]]
        name = cdi.cdi_name(uid, r.device)
        for dev in spec.get("devices") or []:
            if dev.get("name") != name:
                continue
            edits = dev.setdefault("containerEdits", {})
            nodes = [
                n
                for n in edits.get("deviceNodes") or []
                if not str(n.get("path", "")).startswith(CAPS)
            ]
            new = [cdi.device_node(p, device_root) for p in r.nodes]
            edits["deviceNodes"] = nodes[:1] + new + nodes[1:]
    gids: set[int] = set()
    for dev in spec.get("devices") or []:
        gids |= cdi.node_gids((dev.get("containerEdits") or {}).get("deviceNodes") or [])
    if gids:
        base = spec.setdefault("containerEdits", {})
        base["additionalGids"] = sorted(gids | set(base.get("additionalGids") or []))
    return replace(claim, cdi_spec=spec)


def _all_edits(spec: dict[str, Any]) -> list[dict[str, Any]]:
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    return edits
