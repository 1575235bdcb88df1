"""DRA NodePrepareResources latency of a MIG partition (dynamic MIG).

Prints one JSON object. Same set-up and loop as ``dra_prepare.py`` (real kube-apiserver,
``kubeacc agent`` on a synthetic host, a gRPC client on the plugin's unix socket playing the
kubelet), on the ``mig-pair`` host (an H100 and an A100 in MIG mode) with the claim allocated
the ``3g.40gb`` partition at memory slice 4 of the H100. Each timed prepare reads the claim,
records the intent durably, creates the GPU instance and the compute instance through the
(synthetic) NVML, writes the CDI spec and the durable checkpoint; the unprepare after each one
(destroying both instances) is not timed. The synthetic NVML keeps its state in a JSON file
under an flock and appends to its call log; a real driver's instance creation takes far longer
(it reconfigures the GPU), so this measures kube-acc's own cost around the NVML calls.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from dra_agent import bench_agent, proc_status
from dra_prepare import latency, time_prepares

DEVICE = "gpu-0000-01-00-0-mig-3g-40gb-4"


def main(runs: int = 200) -> dict[str, object]:
    def check(answer: Any) -> None:
        (dev,) = answer.devices
        if dev.device_name != DEVICE:
            raise RuntimeError(f"not the partition: {answer}")

    with bench_agent(profile="mig-pair", device=DEVICE) as agent:
        times = time_prepares(agent, runs, check)
        time.sleep(2)
        rss = proc_status(agent.proc.pid)["rss_mb"]
    return {
        "benchmark": "dra_mig",
        "claims_per_call": 1,
        "device": DEVICE,
        "runs": runs,
        "prepare_ms": latency(times),
        "agent_rss_mb": rss,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load": os.getloadavg()[0],
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
