"""Claims recorded as prepared that no pod can use any more, found and unprepared at start.

An unprepare's journal line is not flushed (:mod:`kubeacc.agent.dra.checkpoint`): a power loss
can drop it, and the claim is then still recorded as prepared although the kubelet unprepared it
and, its own checkpoint having forgotten the claim, will never unprepare it again. The recorded
claim would keep its CDI spec, its MIG instances and its GPU's sharing settings, and show its
devices as in use. So at start the agent reads each recorded claim once and unprepares those that
are gone, were made again (another UID) or are no longer allocated: the ResourceClaim controller
deallocates a claim when its last consumer stops using it (deleted or finished pod), and a pod
whose containers may still run keeps its claim allocated. A claim allocated but reserved for no
pod is kept: an allocation without a reservation is legal (the controller leaves such a claim
alone) and says nothing about this node's use of it.

But such a claim is watched (:func:`unreserved`, the agent's runner checks them every second):
after a power loss it is typically the claim of a pod deleted just before, whose unprepare was
dropped and which its owner deletes, or the controller deallocates, moments later. Swept once
only, it stayed prepared for good (its CDI spec, metadata and device kept, the kubelet never to
unprepare it), and the device it holds, free in the API, was prepared for the next claim
allocated it: one device in two prepared claims (seen by the fault runner, docs/testing.md).
Each watched claim is unprepared once it is unused, and no longer watched once a pod reserves
it (the kubelet then prepares and unprepares it as any other).

A prepare meets the same stale claims (:func:`holders`): a whole device allocated to the claim
being prepared that the checkpoint still records for another claim. After a reboot the kubelet
may fail to unprepare a deleted pod's claim (the plugin not registered again yet) and retry only
in its reconcile loop, a minute later; meanwhile the claim was deleted and its device allocated
to the next one (seen by the fault runner on containerd). The driver unprepares such a holder
if it is unused (as the sweep would) and refuses the prepare otherwise (the kubelet retries).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.claims import ClaimSource
from kubeacc.agent.dra.refs import ClaimRef

if TYPE_CHECKING:
    from kubeacc.agent.dra.driver import Driver

log = logging.getLogger(__name__)


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


def unused(
    prepared: Mapping[str, PreparedClaim], source: ClaimSource
) -> dict[str, tuple[ClaimRef, str]]:
    """The unused ones of the ``prepared`` claims: uid -> (reference, reason).

    Raises what ``source`` raises (API server away): the caller tries again later.
    """
    out: dict[str, tuple[ClaimRef, str]] = {}
    for uid, claim in prepared.items():
        why = unused_reason(source.get(claim.namespace, claim.name, uid), uid)
        if why:
            out[uid] = (ClaimRef(claim.namespace, claim.name, uid), why)
    return out


def unreserved(
    prepared: Mapping[str, PreparedClaim], source: ClaimSource, uids: Collection[str]
) -> set[str]:
    """Of ``uids``, the prepared claims allocated but reserved for no pod (to watch).

    Raises what ``source`` raises (API server away)."""
    out = set()
    for uid in uids:
        claim = prepared.get(uid)
        if claim is None:
            continue
        obj = source.get(claim.namespace, claim.name, uid)
        used = obj is not None and not unused_reason(obj, uid)
        if used and obj is not None and not (obj.get("status") or {}).get("reservedFor"):
            out.add(uid)
    return out


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


def sweep(driver: Driver, only: Collection[str] | None = None) -> list[str]:
    """Unprepare the driver's unused claims (of ``only``, when given); the UIDs unprepared
    (errors logged)."""
    prepared = driver.prepared()
    if only is not None:
        prepared = {uid: c for uid, c in prepared.items() if uid in only}
    found = unused(prepared, driver.claims)
    if not found:
        return []
    errors = driver.unprepare([ref for ref, _ in found.values()])
    done = []
    for uid, (ref, why) in found.items():
        if err := errors.get(uid, ""):
            log.error(
                "claim %s/%s (%s) is unused but stays prepared: %s",
                ref.namespace,
                ref.name,
                why,
                err,
            )
        else:
            log.info("unprepared claim %s/%s: %s", ref.namespace, ref.name, why)
            done.append(uid)
    return done
