"""Daemon soak: a steady stream of kubelet calls to ``kubeacc agent`` or ``kubeacc device-plugin``.

For ``--seconds`` (default 600) the benchmark plays the kubelet on the daemon's unix socket
through the real gRPC interfaces the other benchmarks use: NodePrepareResources /
NodeUnprepareResources pairs on the agent's DRA socket (set-up of :mod:`dra_agent`: testbed API
server, an allocated claim, a synthetic 8-GPU host), or Allocate / GetPreferredAllocation pairs
on the device plugin's GPU socket (set-up of :mod:`deviceplugin`). One channel, as the kubelet
keeps. Every ``--every`` seconds it samples the daemon's RSS, threads and open descriptors.

Prints one JSON object: the RSS at start (first sample, once serving), steady (median of the
samples after ``--warmup`` seconds), the maximum, the least-squares slope of RSS after the
warm-up per 1,000 calls and per minute, call counts by method, errors, and the 1-minute load
average at start and end. Targets (issue 30): steady RSS <= 50 MB and flat (a slope that is
noise, not a leak).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from dra_agent import bench_agent, proc_status
from kubelet_client import stubs

TARGET_RSS_MB = 50.0

# One "pair" of calls: returns how many of its calls failed.
Pair = Callable[[], int]


@contextmanager
def _agent() -> Iterator[tuple[int, Pair, tuple[str, str]]]:
    with bench_agent() as agent:
        uid = agent.claim_uid
        prep, unprep = agent.prepare_request(), agent.unprepare_request()
        with grpc.insecure_channel(f"unix://{agent.socket}") as ch:
            stub = stubs("dra_v1_pb2_grpc").DRAPluginStub(ch)

            def pair() -> int:
                failed = bool(stub.NodePrepareResources(prep, timeout=30).claims[uid].error)
                return failed + bool(
                    stub.NodeUnprepareResources(unprep, timeout=30).claims[uid].error
                )

            yield agent.proc.pid, pair, ("NodePrepareResources", "NodeUnprepareResources")


@contextmanager
def _device_plugin() -> Iterator[tuple[int, Pair, tuple[str, str]]]:
    from deviceplugin import _plugin_process

    from kubeacc.discovery import discover
    from kubeacc.model import DeviceType
    from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as pb
    from kubeacc.synthetic import profiles
    from kubeacc.synthetic.host import SyntheticHost

    with tempfile.TemporaryDirectory(prefix="kubeacc-soak-") as tmp:
        host = profiles.build("dgx-h100", Path(tmp) / "host")
        inv = discover(SyntheticHost(host))
        ids = sorted(d.pci_bus_id for d in inv.by_type(DeviceType.GPU) if d.pci_bus_id)
        plugin_dir = Path(tmp) / "dp"
        plugin_dir.mkdir()
        plugin = _plugin_process(host, plugin_dir, Path(tmp) / "plugin.log")
        alloc = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=ids[:2])]
        )
        pref = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=4)
            ]
        )
        try:
            with grpc.insecure_channel(f"unix://{plugin_dir / 'kubeacc-gpu.sock'}") as ch:
                stub = stubs("deviceplugin_v1beta1_pb2_grpc").DevicePluginStub(ch)

                def pair() -> int:
                    failed = not stub.Allocate(alloc, timeout=30).container_responses
                    return failed + (
                        not stub.GetPreferredAllocation(pref, timeout=30).container_responses
                    )

                yield plugin.pid, pair, ("Allocate", "GetPreferredAllocation")
        finally:
            plugin.terminate()
            plugin.wait(15)


def _slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs; None with fewer than 2 distinct xs."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return num / sum((x - mx) ** 2 for x in xs)


def soak(daemon: str, seconds: float, every: float, warmup: float) -> dict[str, object]:
    points: list[dict[str, float]] = []
    pairs = errors = 0
    load_start = round(os.getloadavg()[0], 2)
    with _agent() if daemon == "agent" else _device_plugin() as (pid, pair, methods):
        start = time.monotonic()
        end = start + seconds
        next_sample = start
        while True:
            now = time.monotonic()
            if now >= next_sample:
                points.append({"t_s": round(now - start, 1), "calls": 2 * pairs} | proc_status(pid))
                next_sample += every
            if now >= end:
                break
            errors += pair()
            pairs += 1
        elapsed = time.monotonic() - start
    rss = [p["rss_mb"] for p in points]
    steady = [p for p in points if p["t_s"] >= warmup] or points[-1:]
    per_call = _slope([p["calls"] for p in steady], [p["rss_mb"] for p in steady])
    per_s = _slope([p["t_s"] for p in steady], [p["rss_mb"] for p in steady])
    steady_rss = round(statistics.median(p["rss_mb"] for p in steady), 1)
    return {
        "benchmark": "soak",
        "daemon": daemon,
        "seconds": seconds,
        "sample_every_s": every,
        "warmup_s": warmup,
        "load_1min": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "calls": {methods[0]: pairs, methods[1]: pairs, "total": 2 * pairs},
        "calls_per_s": round(2 * pairs / elapsed, 1),
        "errors": errors,
        "rss_mb": {
            "start": rss[0],
            "steady": steady_rss,
            "max": max(rss),
            "last": rss[-1],
            "slope_per_1000_calls": None if per_call is None else round(per_call * 1000, 4),
            "slope_per_min": None if per_s is None else round(per_s * 60, 4),
        },
        "fds": {"first": points[0]["fds"], "last": points[-1]["fds"]},
        "threads": {"first": points[0]["threads"], "last": points[-1]["threads"]},
        "target_rss_mb": TARGET_RSS_MB,
        "rss_ok": steady_rss <= TARGET_RSS_MB,
        "samples": points,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", choices=("agent", "device-plugin"), default="agent")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before steady state")
    args = parser.parse_args()
    if args.seconds <= 0 or args.every <= 0 or args.warmup < 0:
        parser.error("--seconds and --every must be positive, --warmup not negative")
    print(json.dumps(soak(args.daemon, args.seconds, args.every, args.warmup), indent=2))


if __name__ == "__main__":
    main()
