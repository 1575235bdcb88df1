"""Leader election on a coordination.k8s.io/v1 Lease (one active controller replica).

The protocol is the one client-go's leaderelection package uses: a replica holds the Lease while
it renews ``renewTime`` within ``leaseDurationSeconds``; anyone may take an expired Lease.
Every write carries the resourceVersion that was read, so two candidates racing for the same
Lease cannot both win: the API server refuses the second write with a 409 Conflict.

"Expired" is judged as client-go does, on the candidate's own monotonic clock: the Lease has not
changed (holder, ``renewTime``) for ``leaseDurationSeconds`` since this replica last saw it
change. Comparing the holder's ``renewTime`` with this replica's wall clock instead would let a
replica whose clock is ahead (skew between nodes, or an NTP step forward) take a Lease its
holder is still renewing: two active controllers.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from lightkube import ApiError, Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(
        self,
        client: Client,
        *,
        name: str = "kubeacc-controller",
        namespace: str = "kube-system",
        identity: str,
        lease_duration: int = 15,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.is_leader = False
        #: Another holder's record as last seen (holder, renewTime), and when it was first seen
        #: so (time.monotonic()).
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0

    def _stamp(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def try_acquire_or_renew(self) -> bool:
        """One election round; returns whether this replica leads now."""
        try:
            self.is_leader = self._round()
        except ApiError as exc:
            if int(exc.status.code or 0) != 409:
                log.warning("leader election: %s", exc)
            self.is_leader = False
        return self.is_leader

    def _round(self) -> bool:
        now = self._stamp()
        try:
            lease = self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if int(exc.status.code or 0) != 404:
                raise
            self.client.create(
                Lease(
                    metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                    spec=LeaseSpec(
                        holderIdentity=self.identity,
                        leaseDurationSeconds=self.lease_duration,
                        acquireTime=now,
                        renewTime=now,
                        leaseTransitions=0,
                    ),
                )
            )
            log.info("leader election: %s acquired new lease", self.identity)
            return True
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity
        if holder and holder != self.identity:
            duration = spec.leaseDurationSeconds or self.lease_duration
            record = (holder, str(spec.renewTime))
            mono = time.monotonic()
            if record != self._observed:
                self._observed, self._observed_at = record, mono
            if mono - self._observed_at < duration:
                return False
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
            spec.acquireTime = now
            log.info("leader election: %s takes over the lease from %s", self.identity, holder)
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = self.lease_duration
        spec.renewTime = now
        if spec.acquireTime is None:
            spec.acquireTime = now
        lease.spec = spec
        self.client.replace(lease)  # carries resourceVersion: a racing writer gets 409
        return True

    def release(self) -> None:
        """Give the Lease up (on a clean shutdown) so another replica need not wait."""
        if not self.is_leader:
            return
        try:
            lease = self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec and lease.spec.holderIdentity == self.identity:
                lease.spec.holderIdentity = None
                lease.spec.renewTime = None
                self.client.replace(lease)
        except ApiError as exc:
            log.warning("leader election: release failed: %s", exc)
        self.is_leader = False
