"""Prepare/unprepare without gRPC or cluster: a claim source in memory, files in tmp_path.

(The same paths run against the real API server and kubelet in test_e2e.py / test_crash.py.)
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kubeacc.agent.dra import driver as driver_module
from kubeacc.agent.dra.checkpoint import JOURNAL_NAME, Checkpoint, read_claims
from kubeacc.agent.dra.devices import device_index
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.model import Inventory
from kubeacc.node import cdi

from .faultyos import FaultyOS
from .memclaims import NODE, Claims


def test_prepare_writes_spec_and_checkpoint_and_is_idempotent(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    claims.add("c", "u1", ["gpu-0000-1b-00-0", "gpu-0000-1d-00-0"])
    ref = ClaimRef("ns", "c", "u1")
    (res,) = driver.prepare([ref]).values()
    assert res.error == ""
    assert [d.cdi_device_ids for d in res.devices] == [
        ["kubeacc.io/claim=u1-gpu-0000-1b-00-0"],
        ["kubeacc.io/claim=u1-gpu-0000-1d-00-0"],
    ]
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", "u1").read_text())
    assert spec["kind"] == "kubeacc.io/claim"
    assert "ACCELERATOR_UNITS=0000:1b:00.0,0000:1d:00.0" in spec["containerEdits"]["env"]
    assert {"path": "/dev/nvidia0"} in spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert list(read_claims(tmp_path / "state")) == ["u1"]
    # again: same answer, nothing new in the journal
    journal = (tmp_path / "state" / JOURNAL_NAME).read_bytes()
    (again,) = driver.prepare([ref]).values()
    assert again.devices == res.devices
    assert (tmp_path / "state" / JOURNAL_NAME).read_bytes() == journal


def test_every_claim_gets_its_own_answer(driver: Driver, claims: Claims) -> None:
    claims.add("ok", "u1", ["gpu-0000-1b-00-0"])
    claims.add("foreign", "u2", ["gpu-0000-1b-00-0"], pool="other")
    claims.add("ghost-dev", "u3", ["gpu-0000-ff-00-0"])
    claims.add(
        "wrong-type",
        "u4",
        ["gpu-0000-1d-00-0"],
        config=[
            {
                "source": "FromClaim",
                "opaque": {
                    "driver": "kubeacc.io",
                    "parameters": {"apiVersion": "kubeacc.io/v1alpha1", "kind": "NicConfig"},
                },
            }
        ],
    )
    out = driver.prepare(
        [
            ClaimRef("ns", "ok", "u1"),
            ClaimRef("ns", "foreign", "u2"),
            ClaimRef("ns", "ghost-dev", "u3"),
            ClaimRef("ns", "wrong-type", "u4"),
            ClaimRef("ns", "missing", "u5"),
        ]
    )
    assert out["u1"].error == "" and out["u1"].devices
    assert "pool 'other'" in out["u2"].error
    assert "not published by this node" in out["u3"].error
    assert "NicConfig does not apply to gpu device" in out["u4"].error
    assert "not found" in out["u5"].error
    assert set(driver.prepared()) == {"u1"}


def test_unprepare_needs_no_claim_object_and_is_idempotent(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    claims.add("c", "u1", ["gpu-0000-1b-00-0"])
    driver.prepare([ClaimRef("ns", "c", "u1")])
    claims.objs.clear()  # the claim is gone from the API server
    assert driver.unprepare([ClaimRef("ns", "c", "u1")]) == {"u1": ""}
    assert driver.unprepare([ClaimRef("ns", "c", "u1")]) == {"u1": ""}
    assert cdi.spec_uids(tmp_path / "cdi") == set()
    assert read_claims(tmp_path / "state") == {}


def test_restart_reconciles_specs_with_the_checkpoint(
    driver: Driver, claims: Claims, tmp_path: Path, dgx: Inventory
) -> None:
    claims.add("a", "u1", ["gpu-0000-1b-00-0"])
    claims.add("b", "u2", ["gpu-0000-1d-00-0"])
    driver.prepare([ClaimRef("ns", "a", "u1"), ClaimRef("ns", "b", "u2")])
    cdi_dir = tmp_path / "cdi"
    cdi.spec_path(cdi_dir, "u1").unlink()  # lost (tmpfs after reboot)
    cdi.write_spec(cdi_dir, "u9", {"orphan": True})  # written, never checkpointed
    (cdi_dir / ".kubeacc.io-claim_u8.json.tmp").write_text("{")  # interrupted write
    driver.checkpoint.close()

    index = device_index(dgx)
    again = Driver(NODE, claims, lambda: index, cdi_dir=cdi_dir, state_dir=tmp_path / "state")
    removed, rewritten = again.reconcile()
    assert removed == ["u9"]
    assert rewritten == ["u1"]
    assert cdi.spec_uids(cdi_dir) == {"u1", "u2"}
    assert not list(cdi_dir.glob(".*.tmp"))
    assert set(again.prepared()) == {"u1", "u2"}


def test_torn_journal_line_is_ignored(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    journal = tmp_path / JOURNAL_NAME
    with journal.open("ab") as f:
        f.write(b'{"sum":"0","body":{"op":"prep')  # crash in the middle of an append
    cp2 = Checkpoint(tmp_path)
    cp2.load()
    assert cp2.claims == {}


def test_concurrent_prepares_do_not_corrupt_state(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    names = [f"gpu-0000-{b}-00-0" for b in ("1b", "1d", "3d", "3f")]
    for i, dev in enumerate(names):
        claims.add(f"c{i}", f"u{i}", [dev])
    errors: list[str] = []

    def work(i: int) -> None:
        for _ in range(20):
            r = driver.prepare([ClaimRef("ns", f"c{i}", f"u{i}")])
            errors.extend(x.error for x in r.values() if x.error)
            driver.unprepare([ClaimRef("ns", f"c{i}", f"u{i}")])
        driver.prepare([ClaimRef("ns", f"c{i}", f"u{i}")])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert set(read_claims(tmp_path / "state")) == {"u0", "u1", "u2", "u3"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u0", "u1", "u2", "u3"}


def test_full_disk_prepare_and_unprepare_leave_claims_whole(
    driver: Driver, claims: Claims, tmp_path: Path, fos: FaultyOS
) -> None:
    """Faults at the OS boundary (faultyos.py): each call either done whole or not at all."""
    cdi_dir, state = tmp_path / "cdi", tmp_path / "state"
    claims.add("a", "u1", ["gpu-0000-1b-00-0"])
    claims.add("b", "u2", ["gpu-0000-1d-00-0"])
    assert driver.prepare([ClaimRef("ns", "a", "u1")])["u1"].error == ""

    fos.space = 0  # nothing fits: the CDI spec cannot be written
    out = driver.prepare([ClaimRef("ns", "b", "u2")])
    assert out["u2"].error == "writing the CDI spec failed: No space left on device"
    out2 = driver.unprepare([ClaimRef("ns", "a", "u1")])
    assert out2 == {"u1": "unprepare failed: No space left on device"}
    assert set(read_claims(state)) == {"u1"} == set(driver.prepared())
    assert cdi.spec_uids(cdi_dir) == {"u1"}  # put back, whole
    assert not cdi.leftovers(cdi_dir)

    fos.space = None  # space returns: the same calls work
    assert driver.prepare([ClaimRef("ns", "b", "u2")])["u2"].error == ""
    assert driver.unprepare([ClaimRef("ns", "a", "u1")]) == {"u1": ""}
    assert set(read_claims(state)) == {"u2"} == cdi.spec_uids(cdi_dir)


def test_failed_journal_append_removes_the_new_specs(
    driver: Driver, claims: Claims, tmp_path: Path, fos: FaultyOS
) -> None:
    claims.add("a", "u1", ["gpu-0000-1b-00-0"])
    fos.fsync_fails = True  # the spec is written (not flushed), the journal flush fails
    out = driver.prepare([ClaimRef("ns", "a", "u1")])
    assert out["u1"].error == "checkpoint write failed: Input/output error"
    assert cdi.spec_uids(tmp_path / "cdi") == set()
    assert read_claims(tmp_path / "state") == {} == driver.prepared()


def test_device_nodes_point_at_the_device_root(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    """The runtime opens hostPath: under --device-root, never under the (synthetic) host root."""
    index = device_index(dgx)
    devroot = tmp_path / "devices"
    drv = Driver(
        NODE,
        claims,
        lambda: index,
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "state",
        device_root=devroot,
    )
    claims.add("c", "u1", ["gpu-0000-1b-00-0"])
    (res,) = drv.prepare([ClaimRef("ns", "c", "u1")]).values()
    assert res.error == ""
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", "u1").read_text())
    nodes = spec["devices"][0]["containerEdits"]["deviceNodes"]
    assert {"path": "/dev/nvidia0", "hostPath": str(devroot / "dev/nvidia0")} in nodes
    assert all(n["hostPath"].startswith(str(devroot) + "/dev/") for n in nodes)


def _two_prepared(driver: Driver, claims: Claims) -> tuple[ClaimRef, ClaimRef]:
    """Claims a (u1) and b (u2), one GPU each, prepared."""
    refs = ClaimRef("ns", "a", "u1"), ClaimRef("ns", "b", "u2")
    for ref, gpu in zip(refs, ("gpu-0000-1b-00-0", "gpu-0000-1d-00-0"), strict=True):
        claims.add(ref.name, ref.uid, [gpu])
        assert not driver.prepare([ref])[ref.uid].error
    return refs


def test_unprepare_nowait_does_the_unprepare_or_declines_where_it_would_wait(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    """On the gRPC loop only when nothing must be waited for (kubeacc.agent.dra.plugin)."""
    a, b = _two_prepared(driver, claims)
    with driver.lock:  # another call writes files: waiting would stall the loop
        assert driver.unprepare_nowait([a]) is None
    with driver.guard.hold({"u1"}):  # another call is at work on this claim
        assert driver.unprepare_nowait([a]) is None
        assert driver.unprepare_nowait([b]) == {"u2": ""}  # other claims go on
    assert set(driver.prepared()) == {"u1"}
    assert driver.unprepare_nowait([a]) == {"u1": ""}
    assert driver.prepared() == {}
    assert read_claims(tmp_path / "state") == {}
    assert cdi.spec_uids(tmp_path / "cdi") == set()
    assert driver.unprepare_nowait([a]) == {"u1": ""}  # unknown: done, as unprepare


def test_unprepare_nowait_leaves_the_compaction_to_a_worker_thread(
    driver: Driver, claims: Claims, tmp_path: Path
) -> None:
    """The line that reaches ``compact_after`` writes a snapshot and fsyncs: not on the loop."""
    a, b = _two_prepared(driver, claims)
    driver.checkpoint.compact_after = 4  # two prepares journaled: the next two lines reach it
    assert driver.unprepare_nowait([a]) == {"u1": ""}  # line 3
    assert driver.unprepare_nowait([b]) is None  # line 4 compacts
    assert driver.unprepare([b]) == {"u2": ""}
    assert not (tmp_path / "state" / JOURNAL_NAME).read_bytes()  # folded into the snapshot
    assert read_claims(tmp_path / "state") == {}


def test_unprepare_nowait_leaves_gpu_settings_to_a_worker_thread(
    driver: Driver, claims: Claims
) -> None:
    claims.add("a", "u1", ["gpu-0000-1b-00-0"])
    driver.prepare([ClaimRef("ns", "a", "u1")])

    # what AppliedSharing records: the GPUs' claims with settings to undo
    driver.sharing = SimpleNamespace(gpus={"0000:1b:00.0": {"claims": ["u1"]}})  # type: ignore[assignment]
    assert driver.unprepare_nowait([ClaimRef("ns", "a", "u1")]) is None
    assert set(driver.prepared()) == {"u1"}
    with driver.lock:  # the workers change those records under the driver lock: not read here
        assert driver.unprepare_nowait([ClaimRef("ns", "a", "u1")]) is None


def test_counting_the_prepared_claims_survives_a_concurrent_unprepare(
    driver: Driver, claims: Claims, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kubelet calls from several threads: an unprepare that ends while another call counts
    # the prepared claims (metrics) changed the dict under the count, and the other call failed
    # with "dictionary changed size during iteration" (seen in the fault runner).
    claims.add("a", "ua", ["gpu-0000-1b-00-0"])
    claims.add("b", "ub", ["gpu-0000-1d-00-0"])
    refs = [ClaimRef("ns", "a", "ua"), ClaimRef("ns", "b", "ub")]
    assert all(r.error == "" for r in driver.prepare(refs).values())
    real = driver_module.claim_enforcement
    concurrent: list[str] = []

    def enforcement(uid: str, claim: Any) -> Any:
        if not concurrent:  # the other call's unprepare, mid-count
            concurrent.append(uid)
            other = refs[1] if uid == "ua" else refs[0]
            assert all(r == "" for r in driver.unprepare([other]).values())
        return real(uid, claim)

    monkeypatch.setattr(driver_module, "claim_enforcement", enforcement)
    driver._count()
    assert concurrent and len(driver.checkpoint.claims) == 1
