"""Pods and nodes for the extender's unit tests (real Devices from synthetic hosts)."""

from __future__ import annotations

import http.client
import random
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.wants import Assigned, Decision
from kubeacc.extender.server import ExtenderServer
from kubeacc.extender.service import Extender
from kubeacc.extender.state import Gpu, State, gpu_of
from kubeacc.model import Device, DeviceType
from kubeacc.synthetic import profiles
from tests.hosts import discover


@cache
def host_gpus(profile: str, root: Path) -> tuple[Device, ...]:
    host = profiles.build(profile, root / profile)
    return tuple(d for d in discover(host).devices if d.type is DeviceType.GPU)


def gpus(devices: tuple[Device, ...]) -> list[Gpu]:
    out = [gpu_of(d) for d in devices]
    return [g for g in out if g is not None]


def small_gpu(bdf: str, memory: int, model: str = "l4", numa: int = 0) -> Gpu:
    return Gpu(bdf=bdf, name=f"gpu-{bdf}", model=model, memory=memory, numa=numa, available=True)


def pod(
    name: str,
    *containers: dict[str, str],
    uid: str | None = None,
    node: str | None = None,
    decision: Decision | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    notes = dict(annotations or {})
    if decision is not None:
        notes[DECISION_ANNOTATION] = decision.to_json()
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "resources": {"limits": limits}}
            for i, limits in enumerate(containers)
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid or f"uid-{name}",
            "annotations": notes,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def state_with(nodes: dict[str, list[Gpu]]) -> State:
    state = State()
    state.set_inventory(nodes)
    state.set_pods([])
    return state


def share(node: str, bdf: str, memory: int, cores: int = 0) -> Decision:
    """A decision for one container's memory (and cores) share of GPU ``bdf`` on ``node``."""
    return Decision(node, (Assigned("c0", (bdf,), memory=memory, cores=cores),))


def reserve_at_random(state: State, rng: random.Random, node: str) -> None:
    """Reserve one of ``node``'s GPUs for one of 21 pod UIDs: whole (30 %) or a share."""
    bdf = rng.choice(sorted(state.nodes[node].gpus))
    uid = f"u{rng.randint(0, 20)}"
    if rng.random() < 0.3:
        decision = Decision(node, (Assigned("c0", (bdf,), whole=True),))
    else:
        decision = share(node, bdf, rng.choice([1000, 5000, 9000]), rng.choice([0, 30]))
    state.reserve(uid, decision)


@contextmanager
def serving(state: State) -> Iterator[tuple[Extender, http.client.HTTPConnection]]:
    """An extender of ``state`` served over HTTP on a free port, and a connection to it."""
    ext = Extender(state)
    server = ExtenderServer(ext, "127.0.0.1", 0)
    server.start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        yield ext, conn
    finally:
        conn.close()
        server.stop()
