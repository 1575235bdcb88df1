"""The Cyborg lane's costs, and a claim's prepare and unprepare through Cyborg and Placement.

Prints one JSON object: the install of Cyborg and Placement into their venv (the recorded cold
install, and this call's, which is nothing when cached), the start of the cloud
(kubeacc.testbed.cyborgcloud: RabbitMQ, Placement, Cyborg's API, conductor and one agent) and
the memory of its processes (RSS summed over each process tree), then ``--runs`` claims of one
device prepared and unprepared by the DRA driver with the Cyborg kind (ARQ, allocation, bind,
wait for Bound; unbind, delete, release), each timed.

    python bench/cyborg_lane.py [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.cyborg.backend import CyborgBackend
from kubeacc.agent.dra.devices import device_index
from kubeacc.agent.dra.driver import Driver
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.node.cyborg.client import Credentials
from kubeacc.testbed.cyborgcloud import CyborgCloud, cyborg_dir, ensure_built
from kubeacc.testbed.procs import free_port, rss_bytes

NODE = "bench-node"


class _Claims:
    """Allocated claims as the API server would return them (the bench has no API server)."""

    def __init__(self) -> None:
        self.objs: dict[str, dict[str, Any]] = {}

    def add(self, uid: str, device: str) -> None:
        result = {"request": "r", "driver": "kubeacc.io", "pool": NODE, "device": device}
        self.objs[uid] = {
            "metadata": {"name": uid, "namespace": "bench", "uid": uid},
            "status": {"allocation": {"devices": {"results": [result]}}},
        }

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self.objs.get(uid)


def _tree_rss(pid: int) -> int:
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_bytes(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    start = time.monotonic()
    ensure_built()
    install_now = time.monotonic() - start
    cold = (cyborg_dir() / "install-seconds").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="kubeacc-cyborg-bench-") as tmp:
        work = Path(tmp)
        port = free_port()
        cloud = CyborgCloud(work, work / "logs", (NODE,), f"http://127.0.0.1:{port}")
        start = time.monotonic()
        cloud.start()
        try:
            started = time.monotonic() - start
            rss = {name: _tree_rss(p.pid or 0) for name, p in cloud.procs.items()}
            creds = Credentials(
                cyborg_url=cloud.cyborg_url,
                placement_url=cloud.placement_url,
                token="admin",
                project_id=uuid.uuid4().hex,
                user_id=uuid.uuid4().hex,
            )
            backend = CyborgBackend(creds, NODE, work / "state", ("127.0.0.1", port))
            backend.start()
            try:
                prepares, unprepares = _claims(backend, work, args.runs)
            finally:
                backend.stop()
        finally:
            cloud.stop()
    print(
        json.dumps(
            {
                "cyborg_install_cold_s": float(cold),
                "cyborg_install_this_call_s": round(install_now, 2),
                "cloud_start_s": round(started, 2),
                "cloud_rss_mib": {k: round(v / 2**20, 1) for k, v in rss.items()},
                "cloud_rss_total_mib": round(sum(rss.values()) / 2**20, 1),
                "claims": args.runs,
                "prepare_ms_p50": round(statistics.median(prepares), 1),
                "prepare_ms_max": round(max(prepares), 1),
                "unprepare_ms_p50": round(statistics.median(unprepares), 1),
                "unprepare_ms_max": round(max(unprepares), 1),
            },
            indent=2,
        )
    )


def _claims(backend: CyborgBackend, work: Path, runs: int) -> tuple[list[float], list[float]]:
    """Milliseconds of ``runs`` prepares and unprepares of a one-device claim."""
    claims = _Claims()
    index = device_index(backend.discover())
    driver = Driver(
        NODE,
        claims,
        lambda: index,
        cdi_dir=work / "cdi",
        state_dir=work / "state",
        kinds=[backend.kind],
    )
    driver.reconcile()
    device = sorted(index)[0]
    prepares: list[float] = []
    unprepares: list[float] = []
    for _ in range(runs):
        uid = str(uuid.uuid4())
        claims.add(uid, device)
        ref = ClaimRef("bench", uid, uid)
        t = time.monotonic()
        out = driver.prepare([ref])
        prepares.append((time.monotonic() - t) * 1000)
        if out[uid].error:
            raise SystemExit(f"prepare failed: {out[uid].error}")
        t = time.monotonic()
        if err := driver.unprepare([ref])[uid]:
            raise SystemExit(f"unprepare failed: {err}")
        unprepares.append((time.monotonic() - t) * 1000)
    driver.checkpoint.close()
    return prepares, unprepares


if __name__ == "__main__":
    main()
