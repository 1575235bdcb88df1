"""A device kind registered with the driver (``Driver(kinds=...)``) is called at each step of
prepare, unprepare and start, and what it does reaches the CDI spec and the answers; the
built-in kinds are the driver's first ones."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from kubeacc.agent.dra.checkpoint import PreparedClaim, read_claims
from kubeacc.agent.dra.devices import device_index
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.agent.dra.fpga.kind import FpgaKind
from kubeacc.agent.dra.kind import ClaimError, ClaimWork, DeviceWork, Kind, KindError
from kubeacc.agent.dra.mig.kind import MigKind
from kubeacc.agent.dra.sharing.kind import SharingKind
from kubeacc.agent.dra.whole.kind import WholeDevices
from kubeacc.model import Inventory
from kubeacc.node import cdi

from .memclaims import NODE, Claims

GPU = "gpu-0000-1b-00-0"


class Attached(Kind):
    """A backend that attaches a device node of its own to each device it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.refuse_prepare = ""
        self.refuse_unprepare = False
        self.busy = False

    def prepare(self, dev: DeviceWork) -> None:
        self.calls.append(("prepare", dev.info.name))
        if self.refuse_prepare:
            raise ClaimError(f"{dev.where}: {self.refuse_prepare}")
        dev.nodes = (*dev.nodes, "/dev/attached0")
        dev.env["ATTACHED"] = dev.info.name

    def finish(self, claim: ClaimWork) -> None:
        self.calls.append(("finish", claim.ref.uid))

    def commit(self, claim: ClaimWork, others: Sequence[tuple[str, PreparedClaim]]) -> None:
        self.calls.append(("commit", claim.ref.uid))

    def abandon(self, uids: Sequence[str]) -> None:
        self.calls.append(("abandon", list(uids)))

    def again(self, ref: ClaimRef, done: PreparedClaim) -> str:
        self.calls.append(("again", ref.uid))
        return ""

    def unprepare(self, uids: Sequence[str]) -> None:
        self.calls.append(("unprepare", list(uids)))
        if self.refuse_unprepare:
            raise KindError("the service is away")

    def touches(self, uids: set[str]) -> bool:
        return self.busy

    def restore(self, claims: Mapping[str, PreparedClaim]) -> dict[str, PreparedClaim]:
        self.calls.append(("restore", sorted(claims)))
        return {}

    def recover(self, prepared: set[str]) -> None:
        self.calls.append(("recover", sorted(prepared)))

    def describe(self, uid: str) -> Mapping[str, str]:
        return {}


REF = ClaimRef("ns", "c", "u1")


def _driver(tmp: Path, claims: Claims, inv: Inventory, kind: Kind) -> Driver:
    """A driver with ``kind`` registered, and claim ns/c (uid u1) of one GPU to prepare."""
    index = device_index(inv)
    claims.add("c", "u1", [GPU])
    return Driver(
        NODE, claims, lambda: index, cdi_dir=tmp / "cdi", state_dir=tmp / "state", kinds=[kind]
    )


def test_the_built_in_kinds_come_first(tmp_path: Path, claims: Claims, dgx: Inventory) -> None:
    extra = Attached()
    driver = _driver(tmp_path, claims, dgx, extra)
    kinds = [type(k) for k in driver.kinds]
    assert kinds == [MigKind, FpgaKind, SharingKind, WholeDevices, Attached]


def test_a_registered_kind_prepares_and_unprepares(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    kind = Attached()
    driver = _driver(tmp_path, claims, dgx, kind)
    assert driver.prepare([REF])["u1"].error == ""
    assert kind.calls == [("prepare", GPU), ("finish", "u1"), ("commit", "u1")]
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", "u1").read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert {"path": "/dev/attached0"} in edits["deviceNodes"]
    assert f"ATTACHED={GPU}" in edits["env"]

    kind.calls.clear()
    assert driver.prepare([REF])["u1"].error == ""  # asked again: the kinds check, no more
    assert kind.calls == [("again", "u1")]

    kind.calls.clear()
    kind.refuse_unprepare = True  # a device the kind cannot undo: the claim stays prepared
    assert "the service is away" in driver.unprepare([REF])["u1"]
    assert list(read_claims(tmp_path / "state")) == ["u1"]
    assert cdi.spec_path(tmp_path / "cdi", "u1").exists()
    kind.refuse_unprepare = False
    assert driver.unprepare([REF]) == {"u1": ""}
    assert kind.calls == [("unprepare", ["u1"]), ("unprepare", ["u1"])]
    assert read_claims(tmp_path / "state") == {}


def test_a_kind_that_refuses_fails_only_its_claim_and_is_abandoned(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    kind = Attached()
    kind.refuse_prepare = "the service refuses"
    driver = _driver(tmp_path, claims, dgx, kind)
    res = driver.prepare([REF])["u1"]
    assert res.error == "ResourceClaim ns/c: the service refuses"
    assert kind.calls == [("prepare", GPU), ("abandon", ["u1"])]
    assert not cdi.spec_path(tmp_path / "cdi", "u1").exists()
    assert read_claims(tmp_path / "state") == {}


def test_an_unprepare_that_touches_a_kinds_device_leaves_the_grpc_loop(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    kind = Attached()
    driver = _driver(tmp_path, claims, dgx, kind)
    driver.prepare([REF])
    kind.busy = True
    assert driver.unprepare_nowait([REF]) is None
    kind.busy = False
    assert driver.unprepare_nowait([REF]) == {"u1": ""}


def test_at_start_a_kind_restores_checks_and_recovers(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    first = Attached()
    driver = _driver(tmp_path, claims, dgx, first)
    driver.prepare([REF])
    driver.checkpoint.close()

    kind = Attached()
    again = _driver(tmp_path, claims, dgx, kind)
    again.reconcile()
    assert kind.calls == [("restore", ["u1"]), ("again", "u1"), ("recover", ["u1"])]
