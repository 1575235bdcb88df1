"""Recorded claims no pod can use (a power loss dropped their unprepare): which ones, and the
sweep that unprepares them. A claim source in memory, files in tmp_path; the same sweep runs
against the real API server and kubelet in test_crash.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubeacc.agent.dra import stale
from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.node import cdi

from .memclaims import Claims

GPU = "gpu-0000-1b-00-0"
GPU2 = "gpu-0000-1d-00-0"
GPU3 = "gpu-0000-3d-00-0"


def _claim(uid: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "c", "uid": uid}, "status": status}


ALLOCATED = {"devices": {"results": []}}
RESERVED = [{"resource": "pods", "name": "app", "uid": "p1"}]


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        (None, "deleted"),
        (_claim("u2", allocation=ALLOCATED, reservedFor=RESERVED), "made again with UID u2"),
        (_claim("u1", reservedFor=RESERVED), "no longer allocated"),
        (_claim("u1", allocation=ALLOCATED, reservedFor=RESERVED), ""),
        # allocated, reserved for nobody: legal, and the controller leaves it allocated
        (_claim("u1", allocation=ALLOCATED), ""),
        (_claim("u1", allocation=ALLOCATED, reservedFor=[]), ""),
    ],
)
def test_unused_reason(claim: dict[str, Any] | None, why: str) -> None:
    assert stale.unused_reason(claim, "u1") == why


def test_sweep_unprepares_only_unused_claims(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    for name, uid in (("kept", "u1"), ("done", "u2"), ("gone", "u3")):
        claims.add(name, uid, [GPU])
    refs = [ClaimRef("ns", n, u) for n, u in (("kept", "u1"), ("done", "u2"), ("gone", "u3"))]
    assert all(not r.error for r in driver.prepare(refs).values())
    claims.objs[("ns", "kept")]["status"]["reservedFor"] = RESERVED
    del claims.objs[("ns", "done")]["status"]["allocation"]  # its last consumer went
    del claims.objs[("ns", "gone")]

    assert sorted(stale.sweep(driver)) == ["u2", "u3"]
    assert set(driver.prepared()) == {"u1"}
    assert set(read_claims(tmp_path / "state")) == {"u1"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u1"}
    assert stale.sweep(driver) == []  # nothing more to do


def test_an_unreachable_api_server_fails_the_sweep_and_changes_nothing(
    driver: Driver, claims: Claims
) -> None:
    claims.add("c", "u1", [GPU])
    driver.prepare([ClaimRef("ns", "c", "u1")])

    class Away:
        def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
            raise ConnectionRefusedError("connection refused")

    driver.claims = Away()
    with pytest.raises(ConnectionRefusedError):
        stale.sweep(driver)
    assert set(driver.prepared()) == {"u1"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_periodic_sweep_unprepares_a_claim_only_once_unused_for_its_grace(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    for name, uid, gpu in (("missed", "u1", GPU), ("back", "u2", GPU2), ("used", "u3", GPU3)):
        claims.add(name, uid, [gpu])
    refs = [ClaimRef("ns", n, u) for n, u in (("missed", "u1"), ("back", "u2"), ("used", "u3"))]
    assert all(not r.error for r in driver.prepare(refs).values())
    clock = Clock()
    sweeper = stale.Sweeper(driver, grace=60.0, clock=clock)
    missed = claims.objs.pop(("ns", "missed"))  # its pod went; the kubelet never unprepared
    back = claims.objs[("ns", "back")]
    allocation = back["status"].pop("allocation")

    assert sweeper.pass_once() == []  # found unused: not yet
    clock.now = 30.0
    back["status"]["allocation"] = allocation  # in use again (read late, say): forgotten
    assert sweeper.pass_once() == []
    assert set(sweeper.since) == {"u1"}
    clock.now = 60.0
    assert sweeper.pass_once() == ["u1"]
    assert set(driver.prepared()) == {"u2", "u3"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u2", "u3"}
    assert driver.metrics.claims_swept._value.get() == 1
    # the same name made again (another UID) and the kubelet's late unprepare of the old one
    claims.objs[("ns", "missed")] = missed | {"metadata": {**missed["metadata"], "uid": "u9"}}
    assert driver.unprepare([ClaimRef("ns", "missed", "u1")]) == {"u1": ""}
    assert sweeper.pass_once() == []


def test_the_last_read_is_made_with_the_claim_held_and_decides(
    driver: Driver, claims: Claims
) -> None:
    claims.add("c", "u1", [GPU])
    claims.add("d", "u2", [GPU2])
    driver.prepare([ClaimRef("ns", "c", "u1"), ClaimRef("ns", "d", "u2")])
    held: list[bool] = []

    def why(ref: ClaimRef) -> str:
        # a kubelet call for the claim now would wait: the guard holds it
        with driver.guard.hold({ref.uid}, wait=False) as free:
            held.append(not free)
        return "deleted" if ref.uid == "u2" else ""  # u1 allocated again since the first read

    refs = [ClaimRef("ns", "c", "u1"), ClaimRef("ns", "d", "u2"), ClaimRef("ns", "e", "u3")]
    assert driver.unprepare_unused(refs, why) == {"u2": ("deleted", "")}
    assert held == [True, True]  # u3 was never prepared: not read
    assert set(driver.prepared()) == {"u1"}


def test_a_failing_last_read_changes_nothing(driver: Driver, claims: Claims) -> None:
    claims.add("c", "u1", [GPU])
    driver.prepare([ClaimRef("ns", "c", "u1")])

    def away(ref: ClaimRef) -> str:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(ConnectionRefusedError):
        driver.unprepare_unused([ClaimRef("ns", "c", "u1")], away)
    assert set(driver.prepared()) == {"u1"}
    assert driver.guard.hold({"u1"}, wait=False).__enter__()  # released


def test_a_prepare_unprepares_the_unused_claim_still_recorded_on_its_device(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    # the kubelet never unprepared "old" (its pod deleted while the plugin registered again
    # after a reboot); "old" was deleted and its GPU allocated to "new"
    claims.add("old", "u1", [GPU])
    assert not driver.prepare([ClaimRef("ns", "old", "u1")])["u1"].error
    del claims.objs[("ns", "old")]
    claims.add("new", "u2", [GPU])
    assert not driver.prepare([ClaimRef("ns", "new", "u2")])["u2"].error
    assert set(driver.prepared()) == {"u2"}
    assert set(read_claims(tmp_path / "state")) == {"u2"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u2"}
    # the kubelet's own unprepare of "old", at last: nothing left to do
    assert driver.unprepare([ClaimRef("ns", "old", "u1")]) == {"u1": ""}
    assert set(driver.prepared()) == {"u2"}


def test_a_prepare_of_a_device_another_allocated_claim_holds_is_refused(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    claims.add("old", "u1", [GPU])
    assert not driver.prepare([ClaimRef("ns", "old", "u1")])["u1"].error
    claims.add("new", "u2", [GPU])  # the API gives the GPU twice: the first one keeps it
    err = driver.prepare([ClaimRef("ns", "new", "u2")])["u2"].error
    assert f"device {GPU} is still prepared for claim ns/old (u1)" in err, err
    assert set(driver.prepared()) == {"u1"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u1"}


@pytest.mark.parametrize("admin", ["new", "old"])
def test_a_device_shared_by_an_admin_access_allocation_is_prepared_for_both(
    driver: Driver, claims: Claims, admin: str
) -> None:
    """An allocation with admin access shares a device in use by design (a monitoring claim
    beside the workload's): neither claim is refused or unprepared for the other."""
    claims.add("old", "u1", [GPU])
    if admin == "old":
        claims.objs[("ns", "old")]["status"]["allocation"]["devices"]["results"][0][
            "adminAccess"
        ] = True
    assert not driver.prepare([ClaimRef("ns", "old", "u1")])["u1"].error
    claims.add("new", "u2", [GPU])
    if admin == "new":
        claims.objs[("ns", "new")]["status"]["allocation"]["devices"]["results"][0][
            "adminAccess"
        ] = True
    assert not driver.prepare([ClaimRef("ns", "new", "u2")])["u2"].error
    assert set(driver.prepared()) == {"u1", "u2"}
