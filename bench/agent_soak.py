"""Node-agent soak: minutes of NodePrepareResources/NodeUnprepareResources on one connection.

Prints one JSON object: the agent's RSS, open file descriptors and threads sampled over time
(``--samples`` points spread over ``--minutes``), how many prepare/unprepare pairs ran and how
many failed. Target (DESIGN.md): steady-state RSS <= 60 MB; fds and threads flat. The set-up is
:mod:`dra_agent`'s; the client keeps one channel, as the kubelet does.
"""

from __future__ import annotations

import argparse
import json
import time

import grpc
from dra_agent import bench_agent, proc_status
from kubelet_client import stubs

TARGET_RSS_MB = 60.0


def soak(minutes: float, samples: int) -> dict[str, object]:
    points: list[dict[str, float]] = []
    pairs = errors = 0
    with bench_agent() as agent:
        uid = agent.claim_uid
        prep, unprep = agent.prepare_request(), agent.unprepare_request()
        with grpc.insecure_channel(f"unix://{agent.socket}") as ch:
            stub = stubs("dra_v1_pb2_grpc").DRAPluginStub(ch)
            start = time.monotonic()
            end = start + minutes * 60
            every = minutes * 60 / max(1, samples - 1)
            next_sample = start
            while True:
                now = time.monotonic()
                if now >= next_sample:
                    point = {"t_s": round(now - start, 1), "pairs": pairs}
                    points.append(point | proc_status(agent.proc.pid))
                    next_sample += every
                if now >= end:
                    break
                if stub.NodePrepareResources(prep, timeout=30).claims[uid].error:
                    errors += 1
                if stub.NodeUnprepareResources(unprep, timeout=30).claims[uid].error:
                    errors += 1
                pairs += 1
    rss = [p["rss_mb"] for p in points]
    return {
        "benchmark": "agent_soak",
        "minutes": minutes,
        "pairs": pairs,
        "pairs_per_s": round(pairs / (minutes * 60), 1),
        "errors": errors,
        "rss_mb": {"first": rss[0], "last": rss[-1], "max": max(rss)},
        "fds": {"first": points[0]["fds"], "last": points[-1]["fds"]},
        "threads": {"first": points[0]["threads"], "last": points[-1]["threads"]},
        "target_rss_mb": TARGET_RSS_MB,
        "rss_ok": rss[-1] <= TARGET_RSS_MB,
        "samples": points,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=21)
    args = parser.parse_args()
    print(json.dumps(soak(args.minutes, args.samples), indent=2))


if __name__ == "__main__":
    main()
