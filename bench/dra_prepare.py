"""DRA NodePrepareResources latency and node-agent memory.

Prints one JSON object. Targets (DESIGN.md): NodePrepareResources for 1 claim / 1 device,
CDI write + durable checkpoint, over the unix socket: p99 <= 5 ms; agent steady-state RSS
<= 60 MB (with its metrics port served, as the Helm chart runs it).

Set-up: :mod:`dra_agent` (real kube-apiserver, an allocated claim, ``kubeacc agent`` on a
synthetic 8-GPU server). The benchmark is the kubelet's side: a gRPC client on the plugin's
unix socket calling NodePrepareResources then NodeUnprepareResources, each timed.
Each prepare is a full one: the claim is read from the API server, checked, its CDI spec written
and the checkpoint replaced durably (fsync of file and directory) before the answer.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from dra_agent import BenchAgent, bench_agent, proc_status
from kubelet_client import stubs

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


if __name__ == "__main__":
    print(json.dumps(main(args=sys.argv[1:]), indent=2))
