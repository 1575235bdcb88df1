"""DRA NodePrepareResources latency of a share of a memory-shared GPU.

Prints one JSON object. Same set-up and loop as ``dra_prepare.py`` (real kube-apiserver,
``kubeacc agent`` on the synthetic 8-GPU server, a gRPC client on the plugin's unix socket
playing the kubelet), with the GPU published memory-shared (``--memory-shared``) and the claim
allocated one share of it (a ``shareID`` and ``consumedCapacity`` of 20 GB / 20 %, as the
scheduler writes them). Each prepare reads the claim, turns the consumed capacity into the
share's limits, writes the share's CDI device and the durable checkpoint; only prepare is timed.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

from dra_agent import DEVICE, Share, bench_agent, proc_status
from dra_prepare import TARGET_P99_MS, latency, time_prepares


def main(runs: int = 300) -> dict[str, object]:
    share = Share(memory="19074Mi", cores="20", share_id=str(uuid.uuid4()))

    def check(answer: Any) -> None:
        (dev,) = answer.devices
        if dev.share_id != share.share_id or not dev.cdi_device_ids[0].endswith(share.share_id):
            raise RuntimeError(f"not prepared as a share: {answer}")

    with bench_agent(share, [f"--memory-shared=name={DEVICE}"]) as agent:
        times = time_prepares(agent, runs, check)
        time.sleep(2)
        rss = proc_status(agent.proc.pid)["rss_mb"]
    prepare_ms = latency(times)
    return {
        "benchmark": "dra_shared",
        "claims_per_call": 1,
        "shares_per_claim": 1,
        "share": {"kubeacc.io/memory": share.memory, "kubeacc.io/cores": share.cores},
        "runs": runs,
        "prepare_ms": prepare_ms,
        "target_p99_ms": TARGET_P99_MS,
        "p99_ok": prepare_ms["p99"] <= TARGET_P99_MS,
        "agent_rss_mb": rss,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
