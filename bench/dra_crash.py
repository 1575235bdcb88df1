"""DRA crash safety, long form: SIGKILLs at random moments of a prepare/unprepare stream.

Prints one JSON object. Set-up: a testbed control plane (real kube-apiserver, no kubelet), a
Node object, 7 ResourceClaims allocated a GPU each of its pool, and ``kubeacc agent`` as a
subprocess on a synthetic 8-GPU server with ``--compact-after=3`` (a journal compaction every
three calls). A grpcio client plays the kubelet on the DRA socket: random batches of 1-3
claims, prepare or unprepare, SIGKILL after a random 0-0.8 s (now and then during start-up).
After every restart it checks that the checkpoint, the CDI specs and the calls it saw
acknowledged agree, then repeats the call that was in flight, as the kubelet does. Target:
0 lost, 0 resurrected, 0 specs without record or record without spec, 0 damaged specs.

``python bench/dra_crash.py [KILLS] [SEED]`` (default 100 kills, a random seed).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from kubelet_client import tests_module
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed

NODE = "crash-node"


def main(kills: int, seed: int) -> dict[str, object]:
    crashstream = tests_module("agent.dra.crashstream")
    agentproc = tests_module("agent.dra.agentproc")
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kubeacc-crash-") as tmp,
        Testbed.start(with_kubelet=False) as tb,
    ):
        work = Path(tmp)
        client = tb.client()
        client.create(Node(metadata=ObjectMeta(name=NODE)))
        client.create(Namespace(metadata=ObjectMeta(name="crash")))
        refs = crashstream.allocated_refs(client, "crash", NODE)
        host = profiles.build("dgx-h100", work / "host")
        agent = agentproc.AgentProcess(NODE, host, tb.kubeconfig, work / "kubelet", work)
        tally = crashstream.run(agent, refs, kills=kills, seed=seed)
        tracebacks = agent.log().count("Traceback")
    detail = asdict(tally)
    counts = {k: (len(v) if isinstance(v, list) else v) for k, v in detail.items()}
    return {
        "benchmark": "dra_crash",
        "seed": seed,
        "compact_after": 3,
        **counts,
        "problems": tally.problems(),
        "examples": {k: v[:5] for k, v in detail.items() if isinstance(v, list) and v},
        "agent_tracebacks": tracebacks,
        "ok": tally.problems() == 0 and tracebacks == 0,
        "seconds": round(time.monotonic() - t0, 1),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    s = int(sys.argv[2]) if len(sys.argv) > 2 else int.from_bytes(os.urandom(4), "big")
    print(json.dumps(main(n, s), indent=2))
