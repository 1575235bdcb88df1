"""What each gRPC implementation adds to a node daemon's memory: RSS and threads.

Prints one JSON object. Each run is a fresh interpreter that imports what ``kubeacc
device-plugin`` imports at start (its entry and manager modules), reads its RSS, then starts a
gRPC server on a unix socket and a client channel (as ``Register`` needs) with one
implementation, waits ``--settle`` seconds, collects garbage and reads RSS and threads again.
``grpclib`` is what the node daemons serve with (kubeacc/node/rpc.py); ``grpcio`` is the C-core
implementation the tests call them through. Runs alternate between the two.

docs/dra.md ("Memory: why the agent speaks gRPC through grpclib") uses these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_RUN = """
import asyncio, gc, json, os, sys, tempfile
import kubeacc.cli.entry, kubeacc.deviceplugin.manager

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

async def main(kind, settle):
    before = rss()
    where = tempfile.mkdtemp(prefix="grpc-mem-")
    if kind == "grpcio":
        from grpc import aio
        server = aio.server()
        server.add_insecure_port(f"unix:{where}/serve.sock")
        await server.start()
        channel = aio.insecure_channel(f"unix:{where}/kubelet.sock")
    else:
        from grpclib.client import Channel
        from grpclib.server import Server
        server = Server([])
        await server.start(path=f"{where}/serve.sock")
        channel = Channel(path=f"{where}/kubelet.sock")
    await asyncio.sleep(settle)
    gc.collect()
    print(json.dumps({"before_mb": before, "after_mb": rss(),
                      "threads": len(os.listdir("/proc/self/task"))}))
    channel.close()

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--settle", type=float, default=2.0)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    seen: dict[str, list[dict[str, float]]] = {"grpclib": [], "grpcio": []}
    for n in range(args.runs):
        order = list(seen) if n % 2 == 0 else list(reversed(seen))
        for kind in order:
            out = subprocess.run(
                [sys.executable, "-c", _RUN, kind, str(args.settle)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            seen[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
    result: dict[str, object] = {
        "benchmark": "grpc_memory",
        "load_1min": round(os.getloadavg()[0], 2),
        "runs": args.runs,
    }
    for kind, runs in seen.items():
        added = [r["after_mb"] - r["before_mb"] for r in runs]
        result[kind] = {
            "imports_rss_mb": round(statistics.median(r["before_mb"] for r in runs), 1),
            "serving_rss_mb": round(statistics.median(r["after_mb"] for r in runs), 1),
            "added_mb_min": round(min(added), 1),
            "added_mb_max": round(max(added), 1),
            "threads": statistics.median(r["threads"] for r in runs),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
