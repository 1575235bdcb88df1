"""A long prepare/unprepare stream against a child agent, SIGKILLed at random moments.

The client plays the kubelet on the agent's real DRA socket (grpcio stubs): it remembers what
each acknowledged call did, and after every restart compares that with the checkpoint and the
CDI directory. A call in flight at the kill is unknown until the client repeats it, as the
kubelet would. The agent runs with a tiny ``--compact-after`` so the stream crosses a journal
compaction every few calls. Used by test_crash_stream.py (short) and bench/dra_crash.py (long).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node import cdi
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1
from tests.kubeletclient import dra_v1_pb2_grpc as v1_grpc

from .agentproc import AgentProcess

#: The kubelet's deadline for NodePrepareResources / NodeUnprepareResources.
KUBELET_TIMEOUT_S = 45.0

Ref = tuple[str, str, str]  # namespace, name, uid


def create_allocated_claim(client: Client, ns: str, name: str, pool: str, device: str) -> str:
    """A ResourceClaim allocated one ``kubeacc.io`` device, as the scheduler would write it."""
    client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}
                        ]
                    }
                },
            }
        )
    )
    result = {"request": "gpu", "driver": DRIVER_NAME, "pool": pool, "device": device}
    status = {"allocation": {"devices": {"results": [result]}}}
    client.patch(
        ResourceClaim.Status, name, {"status": status}, namespace=ns, patch_type=PatchType.MERGE
    )
    return str(client.get(ResourceClaim, name, namespace=ns).metadata.uid)


#: the seven whole GPUs of the dgx-h100 profile (its eighth is in MIG mode), one for each
#: claim of :func:`allocated_refs` (the agent refuses to prepare a whole device another
#: allocated claim still holds, as the scheduler never allocates one twice)
GPUS = [f"gpu-0000-{b}-00-0" for b in ("1b", "1d", "3d", "3f", "9d", "9f", "bd")]


def allocated_refs(client: Client, ns: str, node: str, count: int = len(GPUS)) -> list[Ref]:
    """``count`` (at most 7) claims c0, c1, ... allocated a GPU of ``node`` each."""
    if count > len(GPUS):
        raise ValueError(f"at most {len(GPUS)} claims, one per GPU")
    return [
        (ns, f"c{i}", create_allocated_claim(client, ns, f"c{i}", node, GPUS[i]))
        for i in range(count)
    ]


def socket_path(agent: AgentProcess) -> Path:
    return agent.kubelet_root / "plugins" / DRIVER_NAME / "dra.sock"


def call(stub: Any, op: str, refs: list[Ref], timeout: float = KUBELET_TIMEOUT_S) -> dict[str, str]:
    """One NodePrepareResources ("prepare") or NodeUnprepareResources call: uid -> error."""
    claims = [v1.Claim(namespace=n, name=m, uid=u) for n, m, u in refs]
    if op == "prepare":
        resp = stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=claims), timeout=timeout
        )
    else:
        resp = stub.NodeUnprepareResources(
            v1.NodeUnprepareResourcesRequest(claims=claims), timeout=timeout
        )
    return {uid: r.error for uid, r in resp.claims.items()}


def wait_serving(agent: AgentProcess, timeout: float = 120) -> None:
    """Until the DRA socket answers (it is served only after the CDI reconcile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.proc is not None and agent.proc.poll() is not None:
            raise AssertionError(f"agent exited {agent.proc.returncode}:\n{agent.log()[-3000:]}")
        if socket_path(agent).exists():
            try:
                with grpc.insecure_channel(f"unix://{socket_path(agent)}") as ch:
                    call(v1_grpc.DRAPluginStub(ch), "unprepare", [], timeout=5)
                return
            except grpc.RpcError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"agent never served its socket:\n{agent.log()[-3000:]}")


@dataclass
class Tally:
    kills: int = 0
    calls: int = 0  # answered calls
    calls_acknowledged: int = 0
    calls_failed: int = 0
    checks: int = 0
    lost: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    spec_without_checkpoint: list[str] = field(default_factory=list)
    checkpoint_without_spec: list[str] = field(default_factory=list)
    bad_specs: list[str] = field(default_factory=list)
    retry_errors: list[str] = field(default_factory=list)

    def problems(self) -> int:
        return sum(
            len(x)
            for x in (
                self.lost,
                self.resurrected,
                self.spec_without_checkpoint,
                self.checkpoint_without_spec,
                self.bad_specs,
                self.retry_errors,
            )
        )


class CrashStream:
    """The client's view of the claims, the stream, and the after-restart checks."""

    def __init__(
        self, agent: AgentProcess, refs: list[Ref], rng: random.Random, extra: list[str]
    ) -> None:
        self.agent = agent
        self.extra = extra
        self.refs = {u: (n, m, u) for n, m, u in refs}
        self.rng = rng
        self.prepared: dict[str, bool] = dict.fromkeys(self.refs, False)
        self.inflight: tuple[str, list[str]] | None = None
        self.tally = Tally()
        self._lock = threading.Lock()

    # -- the stream -------------------------------------------------------------------------
    def _next_call(self) -> tuple[str, list[str]]:
        op = self.rng.choice(["prepare", "unprepare"])
        pool = [u for u, p in self.prepared.items() if p == (op == "unprepare")]
        if not pool:
            op = "unprepare" if op == "prepare" else "prepare"
            pool = [u for u, p in self.prepared.items() if p == (op == "unprepare")]
        return op, self.rng.sample(pool, min(len(pool), self.rng.randint(1, 3)))

    def _stream(self, stop: threading.Event) -> None:
        with grpc.insecure_channel(f"unix://{socket_path(self.agent)}") as ch:
            stub = v1_grpc.DRAPluginStub(ch)
            while not stop.is_set():
                with self._lock:
                    op, uids = self.inflight = self._next_call()
                try:
                    errors = call(stub, op, [self.refs[u] for u in uids])
                except grpc.RpcError:
                    return  # killed: the call stays in flight
                with self._lock:
                    self._acknowledged(op, uids, errors)
                    self.inflight = None

    def _acknowledged(self, op: str, uids: list[str], errors: dict[str, str]) -> None:
        self.tally.calls += 1
        for uid in uids:
            if errors.get(uid, "missing answer"):
                self.tally.calls_failed += 1
            else:
                self.prepared[uid] = op == "prepare"
                self.tally.calls_acknowledged += 1

    def run_once(self, max_delay: float) -> None:
        """Start the agent, check, retry the call in flight, stream, SIGKILL at random."""
        early = self.rng.random() < 0.15
        self.agent.start(extra=self.extra)
        if early:  # now and then: during start-up (load, compaction, reconcile)
            time.sleep(self.rng.uniform(0.0, 2.0))
            self.agent.kill()
            self.tally.kills += 1
            return
        wait_serving(self.agent)
        self.check()
        self.retry_inflight()
        stop = threading.Event()
        streamer = threading.Thread(target=self._stream, args=(stop,), daemon=True)
        streamer.start()
        time.sleep(self.rng.uniform(0.0, max_delay))
        self.agent.kill()
        self.tally.kills += 1
        stop.set()
        streamer.join(KUBELET_TIMEOUT_S)

    def retry_inflight(self) -> None:
        if self.inflight is None:
            return
        op, uids = self.inflight
        with grpc.insecure_channel(f"unix://{socket_path(self.agent)}") as ch:
            errors = call(v1_grpc.DRAPluginStub(ch), op, [self.refs[u] for u in uids])
        for uid in uids:
            if errors.get(uid, "missing answer"):
                self.tally.retry_errors.append(f"{op} {uid}: {errors.get(uid)}")
        self._acknowledged(op, uids, errors)
        self.inflight = None

    # -- the checks -------------------------------------------------------------------------
    def check(self) -> None:
        """Checkpoint, CDI directory and the acknowledged calls agree (agent idle)."""
        self.tally.checks += 1
        recorded = read_claims(self.agent.state_dir)
        specs = cdi.spec_uids(self.agent.cdi_dir)
        unknown = set(self.inflight[1]) if self.inflight else set()
        t = self.tally
        for uid in self.refs:
            in_ckpt, has_spec = uid in recorded, uid in specs
            if has_spec and not in_ckpt:
                t.spec_without_checkpoint.append(uid)
            if in_ckpt and not has_spec:
                t.checkpoint_without_spec.append(uid)
            if in_ckpt and has_spec:
                spec = _read_json(cdi.spec_path(self.agent.cdi_dir, uid))
                if spec != recorded[uid]["cdi_spec"]:
                    t.bad_specs.append(uid)
            if uid in unknown:
                continue
            if self.prepared[uid] and not in_ckpt:
                t.lost.append(uid)
            if not self.prepared[uid] and in_ckpt:
                t.resurrected.append(uid)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def run(
    agent: AgentProcess,
    refs: list[Ref],
    kills: int,
    seed: int,
    compact_after: int = 3,
    max_delay: float = 0.8,
    progress: Callable[[Tally], None] | None = None,
) -> Tally:
    """``kills`` SIGKILLs, then a last clean start and check."""
    stream = CrashStream(agent, refs, random.Random(seed), [f"--compact-after={compact_after}"])
    try:
        while stream.tally.kills < kills:
            stream.run_once(max_delay)
            if progress is not None:
                progress(stream.tally)
        agent.start(extra=stream.extra)
        wait_serving(agent)
        stream.check()
        stream.retry_inflight()
        stream.check()
    finally:
        agent.stop()
    return stream.tally
