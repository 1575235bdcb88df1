"""DRA NodePrepareResources latency and node-agent memory.

Prints one JSON object. Targets (DESIGN.md): NodePrepareResources for 1 claim / 1 device,
CDI write + durable checkpoint, over the unix socket: p99 <= 5 ms; agent steady-state RSS
<= 60 MB (with its metrics port served, as the Helm chart runs it).

Set-up: :mod:`dra_agent` (real kube-apiserver, an allocated claim, ``kubeacc agent`` on a
synthetic 8-GPU server). The benchmark is the kubelet's side: a gRPC client on the plugin's
unix socket calling NodePrepareResources then NodeUnprepareResources, each timed.
Each prepare is a full one: the claim is read from the API server, checked, its CDI spec written
and the checkpoint replaced durably (fsync of file and directory) before the answer.

``--peer``: beside upstream's DRA test driver (bench/go_peers.py) in the same run: the driver
runs as the kubelet plugin of the same node against the same API server, with its own claim of
the same shape (one request, one device of its pool, allocated through the status); blocks of
prepare + unprepare pairs alternate between the two, each over its own grpcio channel. What the
driver does per call: prepare reads the claim from the API server and writes one CDI spec (no
fsync, no checkpoint: it keeps what it prepared in memory); unprepare removes the spec. The
other arguments go to ``kubeacc agent``. The driver's client runs without its default rate limit
(50 requests/s): calls back to back would otherwise wait for the limiter (go_peers).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
from dra_agent import NODE, BenchAgent, allocated_claim, bench_agent, proc_status
from go_peers import TEST_DRIVER, peer, peer_env, test_driver_argv
from kubelet_client import stubs

from kubeacc.testbed.procs import cpu_seconds

TARGET_P99_MS = 5.0
TARGET_RSS_MB = 60.0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def time_prepares(
    agent: BenchAgent,
    runs: int,
    check: Callable[[Any], None] | None = None,
    unprepares: list[float] | None = None,
) -> list[float]:
    """Milliseconds of ``runs`` NodePrepareResources calls (each undone by an unprepare),
    after 20 warm-up calls; ``check`` sees each answer of the claim; ``unprepares`` gets the
    milliseconds of the unprepares."""
    uid = agent.claim_uid
    prep, unprep = agent.prepare_request(), agent.unprepare_request()
    times: list[float] = []
    with grpc.insecure_channel(f"unix://{agent.socket}") as ch:
        stub = stubs("dra_v1_pb2_grpc").DRAPluginStub(ch)
        for i in range(runs + 20):
            t0 = time.perf_counter()
            resp = stub.NodePrepareResources(prep, timeout=10)
            dt = (time.perf_counter() - t0) * 1000
            if resp.claims[uid].error:
                raise RuntimeError(resp.claims[uid].error)
            if check is not None:
                check(resp.claims[uid])
            t0 = time.perf_counter()
            stub.NodeUnprepareResources(unprep, timeout=10)
            undo = (time.perf_counter() - t0) * 1000
            if i >= 20:  # warm-up: connections, imports, page cache
                times.append(dt)
                if unprepares is not None:
                    unprepares.append(undo)
    return times


def latency(times: list[float]) -> dict[str, float]:
    return {
        "p50": round(_pct(times, 0.5), 3),
        "p90": round(_pct(times, 0.9), 3),
        "p99": round(_pct(times, 0.99), 3),
        "max": round(max(times), 3),
        "mean": round(statistics.fmean(times), 3),
    }


def main(runs: int = 300, args: Sequence[str] = ()) -> dict[str, object]:
    """``args``: more ``kubeacc agent`` options (``--no-device-status`` to compare)."""
    undo: list[float] = []
    load = round(os.getloadavg()[0], 2)
    with bench_agent(args=args) as agent:
        times = time_prepares(agent, runs, unprepares=undo)
        time.sleep(7)  # a re-discovery cycle or so: steady state
        rss = proc_status(agent.proc.pid)["rss_mb"]
    p99 = _pct(times, 0.99)
    return {
        "benchmark": "dra_prepare",
        "claims_per_call": 1,
        "devices_per_claim": 1,
        "runs": runs,
        "agent_args": list(args),
        "prepare_ms": latency(times),
        "unprepare_ms": latency(undo),
        "load_1min": load,
        "target_p99_ms": TARGET_P99_MS,
        "p99_ok": p99 <= TARGET_P99_MS,
        "agent_rss_mb": rss,
        "target_rss_mb": TARGET_RSS_MB,
        "rss_ok": rss <= TARGET_RSS_MB,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


@contextmanager
def test_driver(agent: BenchAgent) -> Iterator[BenchAgent]:
    """Upstream's DRA test driver as the kubelet plugin of the agent's node, with a claim of
    its own allocated one of its devices; stopped (SIGTERM) on exit."""
    assert agent.work is not None and agent.kubeconfig is not None
    work = agent.work / "peer"
    kubelet_root = work / "kubelet"
    (kubelet_root / "plugins" / TEST_DRIVER).mkdir(parents=True)
    (kubelet_root / "plugins_registry").mkdir()
    uid = allocated_claim(agent.client, device="device-00", name="peer", driver=TEST_DRIVER)
    log = work / "driver.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            test_driver_argv(agent.kubeconfig, NODE, kubelet_root, work / "cdi", qps=100_000),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=peer_env(),
        )
    sock = kubelet_root / "plugins" / TEST_DRIVER / "dra.sock"
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the DRA test driver did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield BenchAgent(proc, sock, uid, claim="peer")
    finally:
        proc.terminate()
        proc.wait(15)


def _one_device(answer: Any) -> None:
    if len(answer.devices) != 1 or not answer.devices[0].cdi_device_ids:
        raise RuntimeError(f"not one device with its CDI ID: {answer}")


def beside_test_driver(runs: int, blocks: int, args: Sequence[str]) -> dict[str, object]:
    """Prepare and unprepare p50/p99 of the agent and the DRA test driver, blocks alternating."""
    load = round(os.getloadavg()[0], 2)
    times: dict[str, tuple[list[float], list[float]]] = {"kubeacc": ([], []), "peer": ([], [])}
    # CPU seconds in each side's blocks: its own process, and the control plane's (the claim
    # reads and, for kube-acc, the status writes it causes); warm-up calls included
    cpu = {name: {"own": 0.0, "control_plane": 0.0} for name in times}
    with bench_agent(args=args) as agent, test_driver(agent) as driver:
        sides = {"kubeacc": agent, "peer": driver}
        for n in range(blocks):
            for name in list(sides) if n % 2 == 0 else list(reversed(sides)):
                prep, unprep = times[name]
                own = cpu_seconds(sides[name].proc.pid)
                plane = sum(cpu_seconds(pid) for pid in agent.control_plane)
                prep += time_prepares(sides[name], runs // blocks, _one_device, unprep)
                cpu[name]["own"] += cpu_seconds(sides[name].proc.pid) - own
                cpu[name]["control_plane"] += (
                    sum(cpu_seconds(pid) for pid in agent.control_plane) - plane
                )
        rss = {name: proc_status(side.proc.pid)["rss_mb"] for name, side in sides.items()}
    ours, theirs = times["kubeacc"], times["peer"]
    result: dict[str, object] = {
        "benchmark": "dra_prepare",
        "beside": f"{TEST_DRIVER} (k8s.io/kubernetes v1.37.2 test/e2e/dra/test-driver)",
        "load_1min": load,
        "load_1min_after": round(os.getloadavg()[0], 2),
        "agent_args": list(args),
        "pairs_each": len(ours[0]),
        "blocks": blocks,
        "kubeacc_prepare_ms": latency(ours[0]),
        "peer_prepare_ms": latency(theirs[0]),
        "kubeacc_unprepare_ms": latency(ours[1]),
        "peer_unprepare_ms": latency(theirs[1]),
        "rss_mb": rss,
        "cpu_ms_per_pair": {
            name: {
                what: round(sec * 1000 / (blocks * (runs // blocks + 20)), 3)
                for what, sec in used.items()
            }
            for name, used in cpu.items()
        },
    }
    for call, i in (("prepare", 0), ("unprepare", 1)):
        for q in ("p50", "p99"):
            result[f"ratio_{call}_{q}"] = round(
                _pct(ours[i], float(q[1:]) / 100) / _pct(theirs[i], float(q[1:]) / 100), 2
            )
    return result


if __name__ == "__main__":
    argv = sys.argv[1:]
    if "--peer" in argv:
        argv.remove("--peer")
        peer("test-driver")  # build (or find) it before anything is timed
        print(json.dumps(beside_test_driver(300, 6, argv), indent=2))
    else:
        print(json.dumps(main(args=argv), indent=2))
