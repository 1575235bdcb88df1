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

After the start the same check runs every :data:`INTERVAL_S`: a kubelet that missed an unprepare
(it was down when its pod was force-deleted, its watch lagged behind an API server or etcd
outage) would otherwise leave the claim prepared until the agent's next start. A claim found
unused then is unprepared only once it has been found unused for :data:`GRACE_S` (the kubelet
normally unprepares within seconds of its pod going, and its call is the ordinary path), and
only after a last read made with the claim held (:meth:`Driver.unprepare_unused`), so that a
kubelet prepare of the same claim, allocated again in between, cannot interleave.

A prepare meets the same leftovers at once (:func:`kubeacc.agent.dra.unused.holders`): a
whole device allocated to the claim being prepared that the checkpoint still records for
another claim. After a reboot the kubelet may fail to unprepare a deleted pod's claim (the
plugin not registered again yet) and retry only in its reconcile loop, a minute later;
meanwhile the claim was deleted and its device allocated to the next one (seen by the fault
runner on containerd). The driver unprepares such a holder if it is unused (read with it held)
and refuses the prepare otherwise (the kubelet retries): one device is never recorded for two
claims.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.claims import ClaimSource
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.agent.dra.unused import unused_reason

if TYPE_CHECKING:
    from kubeacc.agent.dra.driver import Driver

log = logging.getLogger(__name__)

#: How often, after the start-up sweep, prepared claims are checked against the API server.
INTERVAL_S = 30.0
#: A claim found unused is unprepared once it has been found unused this long.
GRACE_S = 60.0


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


def sweep(driver: Driver) -> list[str]:
    """The start-up sweep: unprepare the driver's unused claims at once; the UIDs unprepared
    (errors logged). Raises what the claim source raises (API server away)."""
    return Sweeper(driver, grace=0.0).pass_once()


class Sweeper:
    """The periodic check: each :meth:`pass_once` unprepares the claims found unused for at
    least ``grace`` seconds across passes."""

    def __init__(
        self,
        driver: Driver,
        *,
        grace: float = GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.driver = driver
        self.grace = grace
        self.clock = clock
        #: uid -> when it was first found unused (forgotten once found in use again)
        self.since: dict[str, float] = {}

    def pass_once(self) -> list[str]:
        """One check; the UIDs unprepared. Raises what the claim source raises, changing
        nothing (the caller tries again later)."""
        found = unused(self.driver.prepared(), self.driver.claims)
        now = self.clock()
        self.since = {uid: self.since.get(uid, now) for uid in found}
        due = [ref for uid, (ref, _) in found.items() if now - self.since[uid] >= self.grace]
        if not due:
            return []
        claims = self.driver.claims
        results = self.driver.unprepare_unused(
            due, lambda ref: unused_reason(claims.get(ref.namespace, ref.name, ref.uid), ref.uid)
        )
        done = []
        for uid, (why, err) in results.items():
            ref = found[uid][0]
            if err:
                log.error(
                    "claim %s/%s (%s) is unused but stays prepared: %s",
                    ref.namespace,
                    ref.name,
                    why,
                    err,
                )
                continue
            if self.grace:
                log.warning(
                    "unprepared claim %s/%s: %s for %.0f s and the kubelet did not unprepare it",
                    ref.namespace,
                    ref.name,
                    why,
                    now - self.since[uid],
                )
            else:
                log.info("unprepared claim %s/%s: %s", ref.namespace, ref.name, why)
            self.since.pop(uid, None)
            done.append(uid)
        self.driver.metrics.claims_swept.inc(len(done))
        return done
