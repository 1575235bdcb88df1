"""A long API server outage under steady work (issue 46's "Must show"): what the nodes keep and
do while the API server is gone for minutes.

Before the outage the Running pods' claims are noted per node. While the API server is down the
workload keeps stepping (its calls fail and are counted), and every ``sample_every`` seconds each
node's checkpoint, CDI specs and hardware are read: every noted claim must stay prepared (in
the checkpoint, with its spec, its devices as prepared: :func:`invariants.hardware`), and each
agent's resident memory (``VmRSS``) is sampled. Half way through one node's agent is killed and
started again: a prepare that can complete without the API server (the kubelet's repeat of the
claims it holds, answered from the checkpoint) needs the agent back and registered with its
kubelet, so it must come back without the API server. Then the API server starts and every
component must be ready within the runner's ``ready_within``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.faults import faults as F
from tests.faults.invariants import ClusterView, NodeView, Tracker, claim_names, hardware
from tests.faults.nodes import AFU


@dataclass
class OutageReport:
    seconds: float
    #: claims of Running pods per node when the API server went away
    held: dict[str, list[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    #: node -> VmRSS samples in MiB
    rss_mib: dict[str, list[float]] = field(default_factory=dict)
    workload_api_errors: int = 0
    agent_restart_node: str = ""
    #: seconds from the agent's restart until it registered with its kubelet (API server down)
    agent_registered_s: float | None = None
    recover_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "outage_s": self.seconds,
            "claims_held_at_start": sum(len(v) for v in self.held.values()),
            "violations": self.violations[:20],
            "workload_api_errors_during": self.workload_api_errors,
            "agent_restarted_during_outage": self.agent_restart_node,
            "agent_registered_without_api_s": (
                None if self.agent_registered_s is None else round(self.agent_registered_s, 1)
            ),
            "recover_s": None if self.recover_s is None else round(self.recover_s, 1),
            "agent_rss_mib": {
                n: {
                    "first": s[0],
                    "max": max(s),
                    "last": s[-1],
                    "samples": len(s),
                }
                for n, s in self.rss_mib.items()
                if s
            },
        }


def rss_mib(pid: int) -> float:
    """The process's resident set (``VmRSS``) in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise ValueError(f"no VmRSS for {pid}")


def held_claims(view: ClusterView) -> dict[str, list[str]]:
    """Per node, the claim UIDs of its Running (not terminating) pods that it has prepared."""
    uid_of = {c["metadata"]["name"]: c["metadata"]["uid"] for c in view.claims}
    out: dict[str, list[str]] = {n: [] for n in view.nodes}
    for pod in view.pods:
        status = pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        for claim_name in claim_names(pod):
            uid = uid_of.get(claim_name)
            if uid and node in out and uid in view.nodes[node].checkpoint:
                out[node].append(uid)
    return out


def kept(before: ClusterView, nodes: dict[str, NodeView], held: dict[str, list[str]]) -> list[str]:
    """What a node lost of the claims it held: checkpoint entries, specs, devices as prepared
    (against the API objects as they were when the API server went away)."""
    out = []
    for name, uids in held.items():
        nv = nodes[name]
        for uid in uids:
            if uid not in nv.checkpoint:
                out.append(f"{name}: claim {uid} left the checkpoint")
            elif uid not in nv.cdi_uids:
                out.append(f"{name}: claim {uid} lost its CDI spec")
    view = ClusterView(before.claims, before.pods, nodes, time.monotonic())
    for v in hardware(view, Tracker(), set(nodes), leak_grace=1e9, hw_grace=-1, afu=AFU):
        out.append(f"{v.kind}: {v.detail}")
    return out


def run(
    injector: F.Injector,
    seconds: float,
    view: Callable[[], ClusterView],
    node_views: Callable[[], dict[str, NodeView]],
    step: Callable[[], int],
    *,
    sample_every: float = 5.0,
) -> OutageReport:
    """The outage; ``view`` reads the cluster (API up), ``node_views`` the nodes only, ``step``
    takes one workload step and returns the workload's API error count."""
    report = OutageReport(seconds)
    errors0 = step()  # first: a pod it deletes is then terminating in the view, not held
    before = view()
    report.held = held_claims(before)
    nodes = injector.nodes
    restart = sorted(nodes)[0]
    report.agent_restart_node = restart
    injector.testbed.stop_apiserver()
    t0 = time.monotonic()
    restarted = False
    seen: set[str] = set()
    while (elapsed := time.monotonic() - t0) < seconds:
        for name, node in nodes.items():
            if node.agent.proc is not None and node.agent.proc.poll() is None:
                report.rss_mib.setdefault(name, []).append(rss_mib(node.agent.proc.pid))
        for problem in kept(before, _read(node_views), report.held):
            if problem not in seen:
                seen.add(problem)
                report.violations.append(f"{problem} (at {elapsed:.0f}s of the outage)")
        if not restarted and elapsed > seconds / 2:
            restarted = True
            node = nodes[restart]
            count = node.registrations() + 1
            node.agent.kill()
            t1 = time.monotonic()
            node.start_agent()
            try:
                node.agent.wait_log(F.REGISTERED, injector.ready_timeout, count=count)
                report.agent_registered_s = time.monotonic() - t1
            except AssertionError as exc:
                report.violations.append(f"agent not registered without the API server: {exc}")
        report.workload_api_errors = step() - errors0
        time.sleep(sample_every)
    report.recover_s = injector.apiserver_back()
    return report


def _read(node_views: Callable[[], dict[str, NodeView]]) -> dict[str, NodeView]:
    for attempt in range(20):
        try:
            return node_views()
        except ValueError:  # a file read while it was replaced
            if attempt == 19:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")
