"""Binding conditions of FPGAs (kubeacc.agent.dra.fpga.binding): which claims wait for this node's
agent, what it loads and what it reports; the card checked at prepare; the synthetic PR delay."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from kubeacc.agent.dra.features import SliceFeatures, without_binding
from kubeacc.agent.dra.fpga.binding import (
    FpgaBinder,
    Work,
    condition_entry,
    merged_entries,
    pending,
    still_allocated,
    with_binding_conditions,
)
from kubeacc.agent.dra.fpga.conditions import FAILED, PROGRAMMED, NotProgrammed
from kubeacc.agent.fpga_claims import ClaimProgrammer, ProgrammingRefused
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.model import DeviceType
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import PR_SECONDS_FILE, SyntheticKernel
from tests.hosts import discover

NODE = "node-a"
AFU = "d8424dc4a4a3c413f89e433683f9040b"


def _fpga_config(name: str, digest: str, source: str = "FromClaim") -> dict[str, Any]:
    return {"source": source, **fpga_claim_config(name, digest)}


def _claim(
    results: list[dict[str, Any]],
    config: list[dict[str, Any]] | None = None,
    devices: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": "u1"},
        "status": {
            "allocation": {
                "allocationTimestamp": "2026-11-27T06:00:00Z",
                "devices": {"results": results, "config": config or []},
            },
            **({"devices": devices} if devices is not None else {}),
        },
    }


def _result(device: str, pool: str = NODE, driver: str = DRIVER_NAME, bc: bool = True) -> Any:
    r: dict[str, Any] = {"driver": driver, "pool": pool, "device": device, "request": "fpga"}
    if bc:
        r["bindingConditions"] = [PROGRAMMED]
        r["bindingFailureConditions"] = [FAILED]
    return r


DIGEST = "sha256:" + "ab" * 32


def test_pending_takes_only_this_pools_waiting_devices() -> None:
    claim = _claim(
        [
            _result("fpga-0"),
            _result("fpga-1", pool="node-b"),  # another node's device: not ours to answer
            _result("fpga-2", driver="other.example.com"),
            _result("fpga-3", bc=False),  # published without binding conditions
        ],
        [_fpga_config("a.gbs", DIGEST)],
    )
    (work,) = pending(claim, NODE)
    assert (work.device, work.pool, work.uid, work.bitstream) == (
        "fpga-0",
        NODE,
        "u1",
        ("a.gbs", DIGEST),
    )
    assert work.allocated_at == "2026-11-27T06:00:00Z"


@pytest.mark.parametrize(
    ("conditions", "waits"),
    [
        ([], True),
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": PROGRAMMED, "status": "False"}], True),
        ([{"type": PROGRAMMED, "status": "True"}], False),
        ([{"type": FAILED, "status": "True"}], False),
    ],
)
def test_a_device_with_its_outcome_written_waits_no_more(
    conditions: list[dict[str, str]], waits: bool
) -> None:
    entry = {"driver": DRIVER_NAME, "pool": NODE, "device": "fpga-0", "conditions": conditions}
    assert bool(pending(_claim([_result("fpga-0")], devices=[entry]), NODE)) is waits


def test_an_entry_of_another_pool_does_not_count() -> None:
    entry = {
        "driver": DRIVER_NAME,
        "pool": "node-b",
        "device": "fpga-0",
        "conditions": [{"type": PROGRAMMED, "status": "True"}],
    }
    assert pending(_claim([_result("fpga-0")], devices=[entry]), NODE)


def test_the_claims_config_wins_over_the_class_and_none_means_nothing_to_load() -> None:
    other = "sha256:" + "cd" * 32
    claim = _claim(
        [_result("fpga-0")],
        [_fpga_config("mine.gbs", other), _fpga_config("class.gbs", DIGEST, "FromClass")],
    )
    assert pending(claim, NODE)[0].bitstream == ("mine.gbs", other)
    assert pending(_claim([_result("fpga-0")]), NODE)[0].bitstream is None


def test_an_invalid_config_is_a_problem_not_an_exception() -> None:
    bad = _fpga_config("a.gbs", "md5:nope")
    (work,) = pending(_claim([_result("fpga-0")], [bad]), NODE)
    assert work.problem and work.bitstream is None


def test_binding_conditions_go_on_the_named_devices_only() -> None:
    devices = [{"name": "fpga-0"}, {"name": "gpu-0"}]
    out = with_binding_conditions(devices, {"fpga-0"})
    assert out[0]["bindingConditions"] == [PROGRAMMED]
    assert out[0]["bindingFailureConditions"] == [FAILED]
    assert out[1] == {"name": "gpu-0"}
    assert without_binding(out) == devices
    assert SliceFeatures().binding is None  # asked only once a device carries them


def _work(bitstream: tuple[str, str] | None = ("a.gbs", DIGEST), problem: str = "") -> Work:
    return Work("ns", "c", "u1", "fpga-0", NODE, "t", bitstream, problem)


def test_outcomes_of_a_load() -> None:
    def ok(device: str, name: str, digest: str) -> str:
        return f"programmed {device} with {name}"

    def refused(device: str, name: str, digest: str) -> str:
        raise ProgrammingRefused("BitstreamNotAllowed: a.gbs is not allowed")

    def broken(device: str, name: str, digest: str) -> str:
        raise OSError("ioctl failed")

    assert FpgaBinder(None, NODE, ok)._load(_work()) == (  # type: ignore[arg-type]
        True,
        "Programmed",
        "programmed fpga-0 with a.gbs",
    )
    good, reason, message = FpgaBinder(None, NODE, refused)._load(_work())  # type: ignore[arg-type]
    assert (good, reason) == (False, "BitstreamNotAllowed")
    assert "not allowed" in message
    assert FpgaBinder(None, NODE, broken)._load(_work())[:2] == (  # type: ignore[arg-type]
        False,
        "ProgrammingFailed",
    )
    assert FpgaBinder(None, NODE, broken)._load(_work(None))[:2] == (  # type: ignore[arg-type]
        True,
        "NoBitstream",
    )
    assert FpgaBinder(None, NODE, ok)._load(_work(None, "bad"))[:2] == (  # type: ignore[arg-type]
        False,
        "InvalidConfig",
    )


def test_a_load_that_hangs_is_reported_failed() -> None:
    release = threading.Event()

    def hangs(device: str, name: str, digest: str) -> str:
        release.wait(30)
        return "late"

    binder = FpgaBinder(None, NODE, hangs, timeout=0.2)  # type: ignore[arg-type]
    try:
        good, reason, message = binder._load(_work())
    finally:
        release.set()
    assert (good, reason) == (False, "ProgrammingTimedOut")
    assert "0 s" in message or "took longer" in message


def test_each_allocation_is_queued_once() -> None:
    binder = FpgaBinder(None, NODE, lambda *a: "")  # type: ignore[arg-type]
    claim = _claim([_result("fpga-0"), _result("fpga-1")])
    binder.observe(claim)
    binder.observe(claim)  # the watch delivers the claim again: not twice in the queue
    assert binder._queue.qsize() == 2
    again = _claim([_result("fpga-0")])
    again["status"]["allocation"]["allocationTimestamp"] = "2026-11-27T06:05:00Z"
    binder.observe(again)  # allocated anew after a failure: worked on again
    assert binder._queue.qsize() == 3


class _Recorded(FpgaBinder):
    """A binder whose API writes are kept in lists (the cluster test has the real ones)."""

    def __init__(self, program: Any, counter: Counter, fail_writes: int = 0) -> None:
        super().__init__(None, NODE, program, counter=counter)  # type: ignore[arg-type]
        self.written: list[dict[str, Any]] = []
        self.events: list[tuple[str, bool, str]] = []
        self.fail_writes = fail_writes

    def write(self, work: Work, entry: dict[str, Any]) -> None:
        if self.fail_writes:
            self.fail_writes -= 1
            raise ConnectionError("API server away")
        self.written.append(entry)

    def record(self, work: Work, ok: bool, reason: str, message: str) -> None:
        self.events.append((reason, ok, message))


def test_each_outcome_written_is_counted_and_recorded_once() -> None:
    registry = CollectorRegistry()
    counter = AgentMetrics(registry).fpga_bindings

    def refused(device: str, name: str, digest: str) -> str:
        raise ProgrammingRefused("BitstreamNotAllowed: a.gbs is not allowed")

    def count(outcome: str, reason: str) -> float | None:
        return registry.get_sample_value(
            "kubeacc_agent_fpga_bindings_total", {"outcome": outcome, "reason": reason}
        )

    binder = _Recorded(lambda *a: "programmed", counter)
    binder.handle(_work())
    binder.handle(_work(None))
    assert count("programmed", "Programmed") == 1
    assert count("programmed", "NoBitstream") == 1
    assert [(r, ok) for r, ok, _ in binder.events] == [("Programmed", True), ("NoBitstream", True)]

    binder = _Recorded(refused, counter, fail_writes=1)
    binder.handle(_work())  # the write failed: nothing counted, nothing recorded yet
    assert count("failed", "BitstreamNotAllowed") is None and binder.events == []
    binder.handle(_work())
    assert count("failed", "BitstreamNotAllowed") == 1
    [(reason, ok, message)] = binder.events
    assert (reason, ok) == ("BitstreamNotAllowed", False)
    assert "not allowed" in message


def test_condition_entries() -> None:
    ok = condition_entry(_work(), True, "Programmed", "done")
    assert (ok["driver"], ok["pool"], ok["device"]) == (DRIVER_NAME, NODE, "fpga-0")
    [cond] = ok["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (PROGRAMMED, "True", "Programmed")
    [bad] = condition_entry(_work(), False, "BitstreamNotAllowed", "x" * 5000)["conditions"]
    assert (bad["type"], bad["status"]) == (FAILED, "True")
    assert len(bad["message"]) == 1000


# -- the card at prepare, and the synthetic kernel's PR time ------------------------------------


@pytest.fixture
def fpga_host(tmp_path: Path) -> tuple[ClaimProgrammer, Path, str, str]:
    root = profiles.build("intel-fpga-dfl", tmp_path / "host")
    empty = next(d for d in discover(root).by_type(DeviceType.FPGA) if not d.fpga.afu_id)  # type: ignore[union-attr]
    assert empty.fpga and empty.fpga.interface_id
    library = tmp_path / "lib"
    library.mkdir()
    data = make_gbs(AFU, empty.fpga.interface_id, b"x" * 256)
    (library / "a.gbs").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    policy = {"spec": {"allowedBitstreams": [{"name": "a.gbs", "sha256": digest}]}}
    host = SyntheticHost(root, kernel=SyntheticKernel(root))
    return ClaimProgrammer(host, library, lambda: [policy]), root, empty.name, digest


def test_verify_checks_the_card_carries_the_bitstream(
    fpga_host: tuple[ClaimProgrammer, Path, str, str],
) -> None:
    programmer, _root, device, digest = fpga_host
    with pytest.raises(NotProgrammed, match="carries AFU none"):
        programmer.verify(device, "a.gbs", digest)
    programmer.ensure(device, "a.gbs", digest)
    assert AFU in programmer.verify(device, "a.gbs", digest)
    with pytest.raises(ProgrammingRefused, match="BitstreamNotAllowed"):
        programmer.verify(device, "a.gbs", "ff" * 32)
    allow_also = {"spec": {"allowedBitstreams": [{"name": "a.gbs", "sha256": "ff" * 32}]}}
    policies = programmer.policies
    programmer.policies = lambda: [*policies(), allow_also]
    with pytest.raises(ProgrammingRefused, match="DigestMismatch"):
        programmer.verify(device, "a.gbs", "ff" * 32)


def test_a_claim_makes_the_agent_read_only_a_bitstream_a_policy_allows(
    fpga_host: tuple[ClaimProgrammer, Path, str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 43: a claim's bitstream name and digest are a namespace user's. A library file no
    policy allows (here: any large file of the library, named with a made-up digest) is never
    read, on either path; the agent reads only what an admin allowed."""
    programmer, _root, device, digest = fpga_host
    (programmer.library.root / "huge.gbs").write_bytes(b"\0" * (1 << 20))
    read: list[str] = []
    load = programmer.library.load
    monkeypatch.setattr(programmer.library, "load", lambda n, d: (read.append(n), load(n, d))[1])
    for call in (programmer.ensure, programmer.verify):
        with pytest.raises(ProgrammingRefused, match="BitstreamNotAllowed"):
            call(device, "huge.gbs", "sha256:" + "00" * 32)
    assert read == []
    programmer.ensure(device, "a.gbs", digest)
    assert set(read) == {"a.gbs"}


def test_the_synthetic_pr_takes_the_time_the_host_says(
    fpga_host: tuple[ClaimProgrammer, Path, str, str],
) -> None:
    programmer, root, device, digest = fpga_host
    (root / PR_SECONDS_FILE).write_text("3\n")
    loading = threading.Thread(target=programmer.ensure, args=(device, "a.gbs", digest))
    loading.start()
    while not any("PR port" in w for _p, w in programmer.host.kernel.writes):  # type: ignore[attr-defined]
        time.sleep(0.01)
    card = next(d for d in discover(root).devices if d.name == device)
    assert loading.is_alive() and card.fpga and card.fpga.afu_id is None, "still loading"
    loading.join(30)
    assert AFU in programmer.verify(device, "a.gbs", digest)


def test_the_condition_goes_into_the_devices_entry_and_leaves_others_alone() -> None:
    ready = {"type": "Ready", "status": "True"}
    others = [
        {"driver": "other.example.com", "pool": NODE, "device": "fpga-0", "conditions": []},
        {"driver": DRIVER_NAME, "pool": NODE, "device": "gpu-0", "conditions": [ready]},
    ]
    entry = condition_entry(_work(), True, "Programmed", "done")
    added = merged_entries(others, entry)
    assert added[:2] == others and added[2] == entry
    mine = {"driver": DRIVER_NAME, "pool": NODE, "device": "fpga-0"}
    stale = {"type": PROGRAMMED, "status": "False"}
    merged = merged_entries([{**mine, "conditions": [ready, stale]}], entry)
    assert merged == [{**mine, "conditions": [ready, *entry["conditions"]]}]


def test_a_claim_given_back_meanwhile_is_not_written() -> None:
    claim = _claim([_result("fpga-0")])
    (work,) = pending(claim, NODE)
    assert still_allocated(claim, work)
    claim["status"]["allocation"]["allocationTimestamp"] = "2026-11-27T06:09:00Z"
    assert not still_allocated(claim, work)  # allocated anew: that one is other work
    del claim["status"]["allocation"]
    assert not still_allocated(claim, work)
    claim = _claim([_result("fpga-0")])
    claim["metadata"]["uid"] = "u2"
    assert not still_allocated(claim, work)
