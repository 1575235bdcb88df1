"""The fault runner: a short seeded run on a four-node testbed (one of them for kubeacc extender's
pods) with every fault kind, and the invariant checker shown to fail on planted violations (so
that a clean run means something)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from kubeacc.agent.dra.checkpoint import (
    Checkpoint,
    PreparedClaim,
    PreparedDevice,
    read_claims,
)
from kubeacc.testbed import Testbed
from kubeacc.testbed.mountns import shared
from tests.faults import extender, nodes, runtime, throttle
from tests.faults import faults as F
from tests.faults.invariants import ClusterView, NodeView, Tracker, check
from tests.faults.runner import Config, Runner, fault_plan
from tests.faults.workload import KINDS

NODES = {
    "fault-gpu": "dgx-h100",
    "fault-xpu": "kunlun-xpu",
    "fault-fpga": nodes.FPGA_PROFILE,
    "fault-ext": extender.PROFILE,
}
SEED = int(os.environ.get("KUBEACC_FAULTS_SEED", "46"))
#: the faults that are the real runtime's own on a containerd node
RUNTIME_FAULTS = (F.RUNTIME_RESTART, F.NODE_REBOOT, F.POWER_LOSS)


def containerd_nodes(config: Config) -> dict[str, str]:
    """The nodes on containerd + runc: the GPU node (share, MIG and NIC kinds) and every node
    the seed's first runtime restart, reboot and power loss hit, so that each of those is the
    real runtime's (another set: KUBEACC_FAULTS_CONTAINERD=node,...; "" for none)."""
    chosen = os.environ.get("KUBEACC_FAULTS_CONTAINERD")
    if chosen is not None:
        return {n: runtime.CONTAINERD for n in chosen.split(",") if n}
    first = [f for _, f in islice(fault_plan(config.seed, config), len(config.fault_kinds))]
    # not the extender's node: its pods run a registry image containerd cannot pull here
    hit = {f.node for f in first if f.kind in RUNTIME_FAULTS and f.node != "fault-ext"}
    return {n: runtime.CONTAINERD for n in sorted({"fault-gpu", *hit})}


@pytest.mark.cluster
def test_short_run_with_every_fault_kind_breaks_no_invariant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs in a folder of its own with a file in it: a fault must not touch the files of the
    # directory it was started from (runs of the benchmark once saw regular files of theirs go
    # missing; docs/testing.md, "Fault runner").
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    sentinel = cwd / "sentinel.txt"
    sentinel.write_text("kept")
    monkeypatch.chdir(cwd)
    # Graces past the run's length: on a loaded CI machine, after API server restarts, the
    # scheduler once left a pod unattempted for over 2 minutes (docs/testing.md); the end checks
    # still fail on a pod not Running, or a spec or checkpoint entry left, after 4 minutes.
    config = Config(
        seed=SEED,
        duration=60,
        nodes=NODES,
        kinds=KINDS,
        leak_grace=240,
        pending_grace=240,
        settle_timeout=240,
        extender=extender.Plan.make(tmp_path),
    )
    config = replace(config, runtimes=containerd_nodes(config))
    t0 = time.monotonic()
    keep = os.environ.get("KUBEACC_TESTBED_KEEP") == "1"  # the logs, for a failed run
    options = runtime.kubelet_options(NODES, config.runtimes)
    # the agents' lazy mounts under tmp_path show in the containerd nodes' mount namespaces
    with (
        shared(tmp_path),
        Testbed.start(
            nodes=options,
            keep=keep,
            scheduler_extenders=extender.scheduler_extenders(config.extender),
        ) as tb,
    ):
        report = Runner(tb, tmp_path, config).run()
        summary = json.dumps(report.as_json(), indent=1)
        print(summary)
        assert report.violations() == [], f"seed {SEED}:\n{summary}"
    for kind in F.KINDS:
        assert report.faults[kind].injected >= 1, summary
        assert len(report.faults[kind].recover_s) == report.faults[kind].injected
    # the workload did real work: pods ran on prepared claims of every kind, some were deleted
    ran = {name.rsplit("-", 1)[1] for name in report.running_seen}
    assert ran == set(KINDS), f"kinds never Running: {set(KINDS) - ran}\n{summary}"
    assert len(report.running_seen) >= 3, summary
    assert len(report.prepared_seen) >= 3, summary
    assert report.deleted >= 1, summary
    # pods really ran on containerd and their containers saw their claims' devices
    first = [f for _, f in islice(fault_plan(config.seed, config), len(config.fault_kinds))]
    for f in first:
        if f.kind in RUNTIME_FAULTS and f.node in config.runtimes:
            assert any(f" {f.kind} on {f.node}" in s for s in report.sequence), (f, summary)
    for node in config.runtimes:
        assert any(v.startswith(f"{node}/") for v in report.containers_verified), summary
    # the watch-expiry fault is real: a watch from before it was answered 410 Gone
    assert report.watches_expired == report.faults[F.WATCH_EXPIRY].injected, summary
    # the throttled API server is real: others than the load were answered 429 each time
    bit = report.api_faults.bit()
    assert len(bit) == report.faults[throttle.THROTTLED].injected and all(bit), summary
    waited = [n for t in report.api_faults.throttled for n in t["agents_waited_out_429"].values()]
    assert sum(waited) > 0, f"no agent was answered 429\n{summary}"
    assert len(report.api_faults.etcd) == report.faults[throttle.ETCD_OUTAGE].injected, summary
    # the extender-kill fault is real: the extender was killed as often as the fault was drawn
    ext = report.as_json()["extender"]
    assert ext["kills"] == report.faults[extender.EXTENDER_KILL].injected, summary
    # its probe pod waited while it was down and was bound after its return (or refused as full)
    probes = len(ext["probe_bound_after_return_s"]) + ext["probes_refused_as_full"]
    assert probes == ext["kills"], summary
    assert sentinel.read_text() == "kept", "a fault removed a file of the working directory"
    print(f"fault run took {time.monotonic() - t0:.0f}s")


def test_the_seed_fixes_the_fault_sequence() -> None:
    config = Config(seed=7, duration=0, nodes=NODES)
    first = list(islice(fault_plan(7, config), 12))
    assert first == list(islice(fault_plan(7, config), 12))
    assert first != list(islice(fault_plan(8, config), 12))
    assert {f.kind for _, f in first[: len(F.KINDS)]} == set(F.KINDS)


# -- the checker fails on planted violations ------------------------------------------------
def _claim(name: str, uid: str, device: str) -> dict[str, Any]:
    result = {"request": "acc", "driver": "kubeacc.io", "pool": "node-a", "device": device}
    return {
        "metadata": {"name": name, "uid": uid, "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def _pod(name: str, claim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"pod-{name}", "namespace": "ns"},
        "spec": {
            "nodeName": "node-a",
            "resourceClaims": [{"name": "acc", "resourceClaimName": claim}],
        },
        "status": {"phase": "Running"},
    }


def _prepared(name: str, device: str) -> PreparedClaim:
    dev = PreparedDevice(["acc"], "node-a", device, [f"kubeacc.io/claim={name}"])
    return PreparedClaim("ns", name, [dev], {})


def _view(state: Path, claims: list[dict[str, Any]], pods: list[dict[str, Any]]) -> ClusterView:
    checkpoint = read_claims(state)
    node = NodeView("node-a", checkpoint, set(checkpoint))
    return ClusterView(claims, pods, {"node-a": node}, time.monotonic())


def test_checker_passes_a_clean_view_and_finds_a_second_holder_in_a_checkpoint(
    tmp_path: Path,
) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"uid-a": _prepared("a", "gpu-0"), "uid-b": _prepared("b", "gpu-1")})
    cp.close()
    claims = [_claim("a", "uid-a", "gpu-0"), _claim("b", "uid-b", "gpu-1")]
    pods = [_pod("pa", "a"), _pod("pb", "b")]
    assert check(_view(tmp_path, claims, pods), Tracker(), {"node-a"}) == []

    # planted: a copy of that checkpoint where a third claim also holds gpu-0
    planted = tmp_path / "copy"
    planted.mkdir()
    for f in tmp_path.iterdir():
        if f.is_file():
            (planted / f.name).write_bytes(f.read_bytes())
    cp = Checkpoint(planted)
    cp.load()
    cp.record_prepare({"uid-c": _prepared("c", "gpu-0")})
    cp.close()
    claims.append(_claim("c", "uid-c", "gpu-2"))
    found = check(_view(planted, claims, pods), Tracker(), {"node-a"})
    assert [v.kind for v in found] == ["double-allocation"], found
    assert "node-a/gpu-0" in found[0].detail and "c(" in found[0].detail


def test_checker_finds_a_double_allocation_a_lost_prepare_a_leak_and_a_silent_pod(
    tmp_path: Path,
) -> None:
    cp = Checkpoint(tmp_path)
    cp.load()
    cp.record_prepare({"uid-a": _prepared("a", "gpu-0"), "uid-gone": _prepared("x", "gpu-5")})
    cp.close()
    claims = [
        _claim("a", "uid-a", "gpu-0"),
        _claim("b", "uid-b", "gpu-0"),  # the API gives gpu-0 twice
    ]
    silent = {"metadata": {"name": "silent", "uid": "pod-s"}, "status": {"phase": "Failed"}}
    pods = [_pod("pa", "a"), _pod("pb", "b"), silent]  # pb Running, claim b never prepared
    view = _view(tmp_path, claims, pods)
    tracker = Tracker()
    found = check(view, tracker, {"node-a"}, leak_grace=60)
    assert sorted(v.kind for v in found) == [
        "acknowledged-lost",
        "double-allocation",
        "pod-without-reason",
    ], found
    # the spec and checkpoint entry of the gone claim are leaks once the grace has passed
    view.at += 61
    later = check(view, tracker, {"node-a"}, leak_grace=60)
    assert {v.kind for v in later} >= {"leaked-cdi-spec", "leaked-checkpoint"}, later
    # a node in the middle of a fault is not held to its acknowledged prepares
    assert "acknowledged-lost" not in {v.kind for v in check(view, Tracker(), set())}
