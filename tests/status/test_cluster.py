"""``kubeacc status``'s controller check judges the leader Lease on the API server's clock, not
on the holder's ``renewTime`` (issue 46, clock steps: a controller whose clock is behind)."""

from __future__ import annotations

import datetime as dt

from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ManagedFieldsEntry, ObjectMeta
from lightkube.resources.coordination_v1 import Lease

from kubeacc.status.cluster import lease_check, recorded_at

SERVER_NOW = dt.datetime(2026, 12, 6, 9, 0, 0, tzinfo=dt.UTC)


def _lease(renewed: dt.datetime, recorded: list[dt.datetime]) -> Lease:
    fields = [ManagedFieldsEntry(manager=f"m{i}", time=t) for i, t in enumerate(recorded)]
    return Lease(
        metadata=ObjectMeta(name="kubeacc-controller", managedFields=fields),
        spec=LeaseSpec(holderIdentity="replica-a", leaseDurationSeconds=15, renewTime=renewed),
    )


def test_a_holder_whose_clock_is_behind_still_leads() -> None:
    # renewed 2 s ago by the API server's clock, stamped 2 minutes behind by the holder's
    recorded = SERVER_NOW - dt.timedelta(seconds=2)
    lease = _lease(recorded - dt.timedelta(minutes=2), [recorded - dt.timedelta(hours=1), recorded])
    assert recorded_at(lease) == recorded
    check = lease_check(lease, SERVER_NOW, "fix")
    assert check.result == "pass", check
    assert "renewed 2 s ago" in check.detail and "-120 s off the API server's" in check.detail


def test_a_holder_whose_clock_is_ahead_is_gone_once_the_server_saw_no_renewal() -> None:
    recorded = SERVER_NOW - dt.timedelta(seconds=40)
    lease = _lease(recorded + dt.timedelta(hours=2), [recorded])  # renewTime in the future
    check = lease_check(lease, SERVER_NOW, "fix")
    assert check.result == "fail", check
    assert "last renewed 40 s ago (lease 15 s): gone" in check.detail


def test_without_managed_fields_the_renew_time_is_judged() -> None:
    lease = _lease(SERVER_NOW - dt.timedelta(seconds=30), [])
    assert recorded_at(lease) is None
    assert lease_check(lease, SERVER_NOW, "fix").result == "fail"
