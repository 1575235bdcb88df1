"""DRA NodePrepareResources latency of a claim whose GpuConfig changes the GPU.

Prints one JSON object. Same set-up and loop as ``dra_shared.py`` (real kube-apiserver,
``kubeacc agent`` on the synthetic 8-GPU server, a gRPC client on the plugin's unix socket
playing the kubelet; each prepare undone by an untimed unprepare), with the share's claim
carrying a ``GpuConfig``: ``MPS`` (compute mode through the synthetic NVML, the MPS control
daemon started with the synthetic ``nvidia-cuda-mps-control``) or ``TimeSlicing`` with a
``Short`` slice (compute mode, ``nvidia-smi compute-policy -l`` and ``--set-timeslice``). Every
prepare is the GPU's first claim, so it pays for applying the strategy; the unprepare undoes it.
The tools are processes (the synthetic ones Python, started afresh each time): the numbers say
what running the host's tools costs a prepare, with synthetic tools slower to start than the
real ones. ``--runs N`` (default 40) per strategy.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from dra_agent import DEVICE, Share, bench_agent
from dra_prepare import latency, time_prepares

from kubeacc.synthetic.tools.hoststate import read_calls

STRATEGIES: dict[str, dict[str, str]] = {
    "MPS": {"strategy": "MPS"},
    "TimeSlicing": {"strategy": "TimeSlicing", "timeSlice": "Short"},
}


def one(name: str, runs: int) -> dict[str, Any]:
    share = Share(memory="19074Mi", cores="20", share_id=str(uuid.uuid4()))
    config = {"apiVersion": "kubeacc.io/v1alpha1", "kind": "GpuConfig", "sharing": STRATEGIES[name]}
    where: list[Path] = []
    with bench_agent(share, [f"--memory-shared=name={DEVICE}"], config, where) as agent:
        times = time_prepares(agent, runs)
        time.sleep(0.5)
        calls = read_calls(where[0])
    return {
        "prepare_ms": latency(times),
        "host_calls": len(calls),
        "daemon_starts": sum(1 for c in calls if (c["tool"], c["call"]) == ("mps", "start")),
    }


def main(runs: int = 40) -> dict[str, object]:
    return {
        "benchmark": "dra_applied",
        "runs": runs,
        "strategies": {name: one(name, runs) for name in STRATEGIES},
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
    }


if __name__ == "__main__":
    n = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 40
    print(json.dumps(main(n), indent=2))
