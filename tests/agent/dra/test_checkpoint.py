"""The checkpoint and the CDI spec writer under faults injected at the OS boundary
(:mod:`.faultyos`: short writes, ENOSPC after a byte budget, failing fsync) on real files."""

from __future__ import annotations

import errno
import hashlib
import json
import random
from pathlib import Path

import pytest

from kubeacc.agent.dra.checkpoint import (
    FILE_NAME,
    JOURNAL_NAME,
    Checkpoint,
    PreparedClaim,
    PreparedDevice,
    StateError,
    _digest,
    parse_snapshot,
    read_claims,
)
from kubeacc.node import cdi

from .faultyos import FaultyOS


def claim(i: int) -> PreparedClaim:
    dev = f"gpu-{i}"
    spec = cdi.build_spec(f"u{i}", f"ns/c{i}", [cdi.CDIDevice(dev, f"0000:{i:02x}:00.0")])
    return PreparedClaim("ns", f"c{i}", [PreparedDevice(["r"], "n1", dev, ["x"])], spec)


def test_the_call_that_crosses_compaction_is_kept(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path, compact_after=3)
    cp.load()
    for i in range(7):  # compactions at the 3rd and 6th call
        cp.record_prepare({f"u{i}": claim(i)})
    cp.record_unprepare(["u0", "u5"])  # the 8th call; then one that compacts again
    cp.record_unprepare(["u1"])
    cp.close()
    expect = {"u2", "u3", "u4", "u6"}
    assert set(read_claims(tmp_path)) == expect
    again = Checkpoint(tmp_path, compact_after=3)
    again.load()
    assert set(again.claims) == expect


def test_short_writes_are_completed(tmp_path: Path, fos: FaultyOS) -> None:
    fos.chunk = 7
    cp = Checkpoint(tmp_path, compact_after=2)
    cp.load()
    for i in range(5):
        cp.record_prepare({f"u{i}": claim(i)})
    cdi.write_spec(tmp_path, "u1", claim(1).cdi_spec)
    assert set(read_claims(tmp_path)) == {f"u{i}" for i in range(5)}
    assert json.loads(cdi.spec_path(tmp_path, "u1").read_bytes()) == claim(1).cdi_spec


def test_full_disk_fails_the_call_and_keeps_the_journal_clean(
    tmp_path: Path, fos: FaultyOS
) -> None:
    cp = Checkpoint(tmp_path, compact_after=100)
    cp.load()
    cp.record_prepare({"u1": claim(1)})
    fos.space, fos.chunk = 40, 16  # part of the next line fits, then ENOSPC
    with pytest.raises(OSError) as exc:
        cp.record_prepare({"u2": claim(2)})
    assert exc.value.errno == errno.ENOSPC
    assert set(cp.claims) == {"u1"}  # memory unchanged
    assert set(read_claims(tmp_path)) == {"u1"}  # no torn line left in the journal
    assert (tmp_path / JOURNAL_NAME).read_bytes().endswith(b"\n")
    fos.space = None  # space returns: the next call works, and its line is intact
    cp.record_prepare({"u3": claim(3)})
    assert set(read_claims(tmp_path)) == {"u1", "u3"}


def test_failed_fsync_fails_the_call(tmp_path: Path, fos: FaultyOS) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    fos.fsync_fails = True
    with pytest.raises(OSError):
        cp.record_prepare({"u1": claim(1)})
    assert cp.claims == {}
    assert read_claims(tmp_path) == {}


def test_failed_compaction_keeps_snapshot_and_journal(tmp_path: Path, fos: FaultyOS) -> None:
    cp = Checkpoint(tmp_path, compact_after=2)
    cp.load()
    cp.record_prepare({"u1": claim(1)})
    cp.record_prepare({"u2": claim(2)})  # compacts
    snapshot = (tmp_path / FILE_NAME).read_bytes()
    cp.record_prepare({"u3": claim(3)})
    journal = (tmp_path / JOURNAL_NAME).read_bytes()
    fos.space = len(journal) + 10  # the next line fits, its snapshot does not
    cp.record_prepare({"u4": claim(4)})  # acknowledged: in the journal
    assert (tmp_path / FILE_NAME).read_bytes() == snapshot  # old snapshot kept whole
    assert not list(tmp_path.glob(".*.tmp"))
    assert set(read_claims(tmp_path)) == {"u1", "u2", "u3", "u4"}
    fos.space = None
    cp.record_unprepare(["u1"])  # compacts now that there is space
    assert (tmp_path / JOURNAL_NAME).read_bytes() == b""
    assert set(read_claims(tmp_path)) == {"u2", "u3", "u4"}


def test_cdi_spec_is_complete_or_absent(tmp_path: Path, fos: FaultyOS) -> None:
    spec = claim(1).cdi_spec
    fos.space, fos.chunk = 100, 32
    with pytest.raises(OSError):
        cdi.write_spec(tmp_path, "u1", spec)
    assert list(tmp_path.iterdir()) == []  # neither the spec nor its temp file
    fos.space = None
    cdi.write_spec(tmp_path, "u1", spec)
    assert json.loads(cdi.spec_path(tmp_path, "u1").read_bytes()) == spec


def test_random_faults_lose_nothing(tmp_path: Path, fos: FaultyOS) -> None:
    """A random stream with random full-disk moments: what was acknowledged is what loads."""
    rng = random.Random(11)
    cp = Checkpoint(tmp_path, compact_after=4)
    cp.load()
    acked: set[str] = set()
    failures = 0
    for _ in range(400):
        fos.space = rng.choice([None, None, 0, rng.randint(1, 3000)])
        fos.chunk = rng.choice([1 << 30, rng.randint(1, 64)])
        uids = rng.sample([f"u{i}" for i in range(12)], rng.randint(1, 3))
        try:
            if rng.random() < 0.5:
                cp.record_prepare({u: claim(int(u[1:])) for u in uids})
                acked |= set(uids)
            else:
                cp.record_unprepare(uids)
                acked -= set(uids)
        except OSError:
            failures += 1
        assert set(cp.claims) == acked
    fos.space = None
    cp.close()
    assert failures > 50  # the faults did hit
    assert set(read_claims(tmp_path)) == acked
    again = Checkpoint(tmp_path)
    again.load()
    assert set(again.claims) == acked


def test_unreadable_snapshot_refuses_to_start_and_is_kept(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"u1": claim(1)})
    cp.compact()
    cp.close()
    path = tmp_path / FILE_NAME
    damaged = path.read_bytes().replace(b'"c1"', b'"c9"')
    path.write_bytes(damaged)
    with pytest.raises(StateError, match="checksum mismatch") as exc:
        Checkpoint(tmp_path).load()
    assert "\n" not in str(exc.value)
    assert path.read_bytes() == damaged  # not moved aside, not replaced by an empty one


def test_damaged_journal_line_before_intact_ones_refuses_to_start(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"u1": claim(1)})
    cp.record_prepare({"u2": claim(2)})  # and then a crash: no clean stop
    journal = tmp_path / JOURNAL_NAME
    first, second = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(first[:20] + b"\n" + second)
    with pytest.raises(StateError, match="damaged line at byte 0"):
        Checkpoint(tmp_path).load()


def test_a_prepare_is_flushed_an_unprepare_only_written(tmp_path: Path, fos: FaultyOS) -> None:
    """A killed process keeps its written lines (page cache): the next load sees the unprepare."""
    cp = Checkpoint(tmp_path)
    cp.load()
    before = fos.fsyncs
    cp.record_prepare({"u1": claim(1), "u2": claim(2)})
    assert fos.fsyncs == before + 1
    fos.fsync_fails = True  # a flush would fail the call now: an unprepare makes none
    cp.record_unprepare(["u1"])
    assert set(cp.claims) == {"u2"}
    with pytest.raises(OSError):
        cp.record_prepare({"u3": claim(3)})
    fos.fsync_fails = False
    assert set(read_claims(tmp_path)) == {"u2"}  # no clean stop: snapshot + journal as written
    again = Checkpoint(tmp_path)
    again.load()
    assert set(again.claims) == {"u2"}


def _power_loss(tmp_path: Path, keep: int) -> tuple[bytes, list[bytes]]:
    """Journal of a flushed prepare of u1..u3, then unflushed unprepares of u1 and u2; the
    second-to-last line's first ``keep`` bytes never reached the disk (NUL bytes instead)."""
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({f"u{i}": claim(i) for i in (1, 2, 3)})
    cp.record_unprepare(["u1"])
    cp.record_unprepare(["u2"])
    lines = (tmp_path / JOURNAL_NAME).read_bytes().splitlines(keepends=True)
    lines[-2] = b"\0" * keep + lines[-2][keep:]
    return b"".join(lines), lines


@pytest.mark.parametrize("keep", [1, 4096])  # part of a line, and the line with its newline
def test_a_power_loss_hole_in_unprepare_lines_keeps_those_claims_prepared(
    tmp_path: Path, keep: int
) -> None:
    data, _ = _power_loss(tmp_path, keep)
    (tmp_path / JOURNAL_NAME).write_bytes(data)
    cp = Checkpoint(tmp_path)
    cp.load()
    # u1's unprepare is lost (kubeacc.agent.dra.stale finds it unused), u2's was kept
    assert set(cp.claims) == ({"u1", "u3"} if keep == 1 else {"u1", "u2", "u3"})


def test_a_hole_then_the_prepare_whose_flush_was_under_way_loads(tmp_path: Path) -> None:
    """Issue 46's power-loss layout: synced lines, an unprepare never flushed whose first block
    reads back as NUL (its newline kept), then a prepare written whose fsync never returned (so
    never acknowledged). Every acknowledged claim is kept, the unacknowledged one recorded (the
    safe side), and the agent starts."""
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({f"u{i}": claim(i) for i in (1, 2, 3)})  # synced
    cp.record_unprepare(["u1"])  # never flushed
    cp.record_prepare({"u4": claim(4)})  # written; its flush did not return
    lines = (tmp_path / JOURNAL_NAME).read_bytes().splitlines(keepends=True)
    lines[1] = b"\0" * (len(lines[1]) - 1) + b"\n"
    (tmp_path / JOURNAL_NAME).write_bytes(b"".join(lines))
    again = Checkpoint(tmp_path)
    again.load()
    assert set(again.claims) == {"u1", "u2", "u3", "u4"}


def test_a_hole_before_a_flushed_prepare_line_refuses_to_start(tmp_path: Path) -> None:
    """A prepare's flush writes every line before it: a hole, a prepare and a line after that
    prepare means the prepare was acknowledged with the hole still there: damage, not power
    loss."""
    _, lines = _power_loss(tmp_path, 1)
    cp = Checkpoint(tmp_path)
    cp.load()  # folds the journal into the snapshot; now write the damaged journal over it
    cp.record_prepare({"u4": claim(4)})
    cp.record_unprepare(["u4"])
    flushed = (tmp_path / JOURNAL_NAME).read_bytes()
    (tmp_path / JOURNAL_NAME).write_bytes(lines[-2] + flushed)
    with pytest.raises(StateError, match="damaged line at byte 0 before a flushed one"):
        Checkpoint(tmp_path).load()


def test_unwritable_state_directory_refuses_to_start(tmp_path: Path, fos: FaultyOS) -> None:
    fos.space = 0
    with pytest.raises(StateError, match="is not writable: No space left on device"):
        Checkpoint(tmp_path).load()


def test_share_ids_survive_the_journal_and_the_snapshot(tmp_path: Path) -> None:
    spec = cdi.build_spec("u1", "ns/c", [cdi.CDIDevice("gpu-0", "0000:01:00.0", share_id="s1")])
    dev = PreparedDevice(["r"], "n1", "gpu-0", ["kubeacc.io/claim=u1-gpu-0-s1"], share_id="s1")
    cp = Checkpoint(tmp_path, compact_after=2)
    cp.load()
    cp.record_prepare({"u1": PreparedClaim("ns", "c", [dev], spec)})
    assert read_claims(tmp_path)["u1"]["devices"][0]["share_id"] == "s1"  # from the journal
    cp.record_prepare({"u2": claim(2)})  # compacts
    cp.close()
    again = Checkpoint(tmp_path)
    again.load()
    assert again.claims["u1"].devices == [dev]
    assert again.claims["u2"].devices[0].share_id is None


def test_a_device_recorded_before_shares_existed_loads(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"u1": claim(1)})  # and then a crash: no clean stop
    journal = tmp_path / JOURNAL_NAME
    entry = json.loads(journal.read_text())
    del entry["body"]["claims"]["u1"]["devices"][0]["share_id"]  # as older agents wrote it
    del entry["sha"]  # in the line format of older agents too
    entry["sum"] = _digest(entry["body"])
    journal.write_text(json.dumps(entry) + "\n")
    again = Checkpoint(tmp_path)
    again.load()
    assert again.claims["u1"].devices[0].share_id is None


def test_a_journal_line_is_its_call_encoded_once_with_the_hash_of_those_bytes(
    tmp_path: Path,
) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"u1": claim(1)})
    cp.record_unprepare(["u1"])
    lines = (tmp_path / JOURNAL_NAME).read_bytes().splitlines()
    assert len(lines) == 2
    for line in lines:
        head, _, raw = line.partition(b',"body":')
        assert hashlib.sha256(raw[:-1]).hexdigest() == json.loads(head + b"}")["sha"]
    assert json.loads(lines[1]) == {
        "sha": hashlib.sha256(b'{"op":"unprepare","uids":["u1"]}').hexdigest(),
        "body": {"op": "unprepare", "uids": ["u1"]},
    }


def test_a_line_whose_body_does_not_match_its_hash_is_damaged(tmp_path: Path) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"u1": claim(1)})
    cp.record_prepare({"u2": claim(2)})  # and then a crash
    journal = tmp_path / JOURNAL_NAME
    first, second = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(first.replace(b'"c1"', b'"c7"') + second)
    with pytest.raises(StateError, match="damaged line at byte 0"):
        Checkpoint(tmp_path).load()


def test_a_clean_stop_folds_the_journal_into_the_snapshot(tmp_path: Path) -> None:
    """So an agent of a version before the ``sha`` lines can be rolled back to."""
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"u1": claim(1), "u2": claim(2)})
    cp.record_unprepare(["u2"])
    cp.close()
    assert (tmp_path / JOURNAL_NAME).read_bytes() == b""
    assert set(parse_snapshot((tmp_path / FILE_NAME).read_bytes())) == {"u1"}
    cp.close()  # a second close has nothing left to do
