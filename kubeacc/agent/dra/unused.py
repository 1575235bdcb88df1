"""Whether a recorded claim is still used, read from its API object, and which recorded claims
hold a device (:mod:`kubeacc.agent.dra.stale` says when and why the agent asks). No driver
import: the driver asks too, at prepare."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from kubeacc.agent.dra.checkpoint import PreparedClaim


def unused_reason(claim: dict[str, Any] | None, uid: str) -> str:
    """Why the claim read for the prepared ``uid`` is unused ("" if a pod may still use it)."""
    if claim is None:
        return "deleted"
    got = (claim.get("metadata") or {}).get("uid")
    if got != uid:
        return f"made again with UID {got}"
    status = claim.get("status") or {}
    if not status.get("allocation"):
        return "no longer allocated"
    return ""


def holders(
    recorded: Mapping[str, PreparedClaim], devices: Collection[tuple[str, str]], skip: set[str]
) -> dict[str, tuple[PreparedClaim, str]]:
    """The recorded claims (but ``skip``) that hold one of the whole ``devices`` ((pool, device)
    pairs): uid -> (claim, the device)."""
    out = {}
    for uid, claim in recorded.items():
        if uid in skip:
            continue
        for d in claim.devices:
            if d.share_id is None and (d.pool, d.device) in devices:
                out[uid] = (claim, d.device)
                break
    return out


def admin_devices(claim: Mapping[str, Any] | None) -> set[tuple[str, str]]:
    """The (pool, device) pairs a claim was allocated with admin access: such an allocation
    shares a device in use by design (a monitoring claim), so it neither holds the device
    against another claim nor is held off it."""
    alloc = ((claim or {}).get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    return {(str(r.get("pool")), str(r.get("device"))) for r in results if r.get("adminAccess")}
