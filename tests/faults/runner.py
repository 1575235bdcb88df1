"""The fault runner: a seeded workload on the multi-node testbed, real faults injected between
its steps, the invariants of :mod:`tests.faults.invariants` checked after every step and at the
end.

The seed fixes two sequences, drawn from two generators so that neither shifts the other: the
workload's decisions (create which kind, delete which pod) and the faults (which kind, which
node, how long an outage, after how many workload steps). The first faults are one of each kind
in a seeded order, so that every run, however short, has each kind once. Timing is not
reproduced (the cluster is real); the order of steps and faults is.

The end of a run: the pods are given time to settle (Running, or Pending with a reason), then
everything is deleted and every node's checkpoint and CDI directory must be empty.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.agent.dra.classes import apply_device_classes
from kubeacc.crds.resources import as_dict, install_crds
from kubeacc.node import cdi
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import install_agent_access
from tests.agent.dra.agentproc import AgentProcess
from tests.faults import (
    clockstep,
    extender,
    hardware,
    nodes,
    outage,
    powerloss,
    runtime,
    throttle,
)
from tests.faults import faults as F
from tests.faults.invariants import ClusterView, NodeView, Tracker, Violation, check, pod_reason
from tests.faults.lifecycle import LifecycleProcess
from tests.faults.operations import Operations
from tests.faults.outage import OutageReport
from tests.faults.workload import API_ERRORS, Workload

NAMESPACE = "faults"


@dataclass(frozen=True)
class Config:
    seed: int
    #: seconds of workload and faults (at least one fault of each kind is always injected)
    duration: float
    #: node name -> synthetic host profile (or tests.faults.nodes.FPGA_PROFILE)
    nodes: dict[str, str]
    #: claim kinds of the workload (tests.faults.workload.KINDS)
    kinds: tuple[str, ...] = ("gpu", "xpu")
    fault_kinds: tuple[str, ...] = F.KINDS
    #: workload steps between two faults (uniform)
    steps_between: tuple[int, int] = (3, 8)
    step_pause: float = 0.5
    #: at most this many pods at once
    max_live: int = 8
    outage_seconds: tuple[float, float] = (3.0, 15.0)
    #: every component ready again within this after a fault ends
    ready_within: float = 90.0
    #: a CDI spec / checkpoint entry of a deleted claim, or a Pending pod with no reason, is a
    #: violation once seen this long: after an API server restart the kubelet's and the
    #: scheduler's watches were seen to lag ~60 s (a bound pod unseen by its kubelet)
    leak_grace: float = 120.0
    pending_grace: float = 120.0
    #: a Running pod's device not as prepared (after a reboot the agent makes it again)
    hw_grace: float = 60.0
    settle_timeout: float = 120.0
    #: > 0: one API server outage this long under the workload before the mixed faults
    #: (tests.faults.outage)
    long_outage: float = 0.0
    #: node -> its kubelet's CRI runtime, "fake" (the default) or "containerd"
    #: (tests/faults/runtime.py; the testbed's KubeletOptions(runtime=...) must agree)
    runtimes: dict[str, str] = field(default_factory=dict)
    #: kube-scheduler configured with ``kubeacc extender`` (tests.faults.extender: the
    #: ``extender`` kind and the ``extender-kill`` fault need it)
    extender: extender.Plan | None = None


@dataclass
class Stats:
    injected: int = 0
    violations: list[str] = field(default_factory=list)
    recover_s: list[float] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        rec = self.recover_s
        return {
            "injected": self.injected,
            "invariants_broken": len(self.violations),
            "violations": self.violations[:10],
            "recover_s": {
                "p50": round(statistics.median(rec), 2) if rec else None,
                "max": round(max(rec), 2) if rec else None,
            },
        }


@dataclass
class Report:
    seed: int
    nodes: dict[str, str]
    steps: int = 0
    elapsed_s: float = 0.0
    faults: dict[str, Stats] = field(default_factory=dict)
    #: violations seen at the end of the run (after the pods settled, after deleting them)
    final: list[str] = field(default_factory=list)
    #: (pod, phase:reason) for every state a pod was seen in while not Running
    not_running_seen: set[tuple[str, str]] = field(default_factory=set)
    running_seen: set[str] = field(default_factory=set)
    #: containers on containerd nodes whose own report matched their claim (tests/faults/runtime)
    containers_verified: set[str] = field(default_factory=set)
    #: claim UIDs seen in a checkpoint, and the most prepared at once (all nodes)
    prepared_seen: set[str] = field(default_factory=set)
    most_prepared: int = 0
    created: Counter[str] = field(default_factory=Counter)
    deleted: int = 0
    api_errors: int = 0
    sequence: list[str] = field(default_factory=list)
    outage: OutageReport | None = None
    #: watch-expiry faults after which a watch from the resourceVersion seen before the fault
    #: was answered 410 Gone (as every component's was: they do not log it at their verbosity)
    watches_expired: int = 0
    #: controller hand-overs seen (a replica acting after another did)
    controller_handovers: int = 0
    api_faults: throttle.ApiFaultLog = field(default_factory=throttle.ApiFaultLog)
    extender: dict[str, Any] | None = None
    #: the AcceleratorOperations (tests/faults/operations.py)
    operations: dict[str, Any] = field(default_factory=dict)

    def violations(self) -> list[str]:
        during = self.outage.violations if self.outage else []
        return [v for s in self.faults.values() for v in s.violations] + self.final + during

    def as_json(self) -> dict[str, Any]:
        reasons = Counter(r for _, r in self.not_running_seen)
        return {
            "seed": self.seed,
            "nodes": self.nodes,
            "elapsed_s": round(self.elapsed_s, 1),
            "steps": self.steps,
            "faults": {k: s.as_json() for k, s in self.faults.items()},
            "final_violations": self.final,
            "long_outage": self.outage.as_json() if self.outage else None,
            "watch_expiry_answered_410": self.watches_expired,
            "controller_handovers": self.controller_handovers,
            **self.api_faults.as_json(),
            "extender": self.extender,
            "operations": self.operations,
            "faults_injected": [s for s in self.sequence if not s.startswith("step")],
            "workload": {
                "created": dict(self.created),
                "deleted": self.deleted,
                "api_errors": self.api_errors,
                "pods_seen_running": len(self.running_seen),
                "containers_verified_from_inside": len(self.containers_verified),
                "claims_seen_prepared": len(self.prepared_seen),
                "most_prepared_at_once": self.most_prepared,
                "pods_seen_not_running_by_reason": dict(reasons),
            },
        }


def fault_plan(seed: int, config: Config) -> Iterator[tuple[int, F.Fault]]:
    """(workload steps before it, fault), forever: one of each kind first, then at random."""
    rng = random.Random(f"{seed}/faults")
    names = sorted(config.nodes)

    def one(kind: str) -> tuple[int, F.Fault]:
        steps = rng.randint(*config.steps_between)
        if kind in (F.APISERVER_OUTAGE, *throttle.KINDS, extender.EXTENDER_KILL):
            return steps, F.Fault(kind, seconds=round(rng.uniform(*config.outage_seconds), 1))
        if kind in F.CLUSTER_KINDS:
            return steps, F.Fault(kind)
        if kind == F.CLOCK_STEP:
            return steps, clockstep.fault(rng, names)
        node = rng.choice(names)
        if kind in (F.NODE_REBOOT, F.POWER_LOSS):
            return steps, F.Fault(kind, node=node, keeps_bitstreams=rng.random() < 0.5)
        return steps, F.Fault(kind, node=node)

    first = list(config.fault_kinds)
    rng.shuffle(first)
    for kind in first:
        yield one(kind)
    while True:
        yield one(rng.choice(config.fault_kinds))


class Runner:
    def __init__(self, testbed: Testbed, workdir: Path, config: Config) -> None:
        self.testbed = testbed
        self.config = config
        self.client = testbed.client(field_manager="kubeacc-faults")
        self.nodes: dict[str, F.Node] = {}
        self.clocks = clockstep.ClockSteps(testbed, workdir, sorted(config.nodes))
        for name, profile in sorted(config.nodes.items()):
            setup = nodes.build(name, profile, workdir / name)
            kubeconfig = throttle.agent_identity(testbed, name, workdir / name)
            agent = AgentProcess(
                name, setup.host, kubeconfig, testbed.node(name).root_dir, workdir / name
            )
            args = (*setup.agent_args, *self.clocks.agent_args(name))
            self.nodes[name] = F.Node(name, setup.host, agent, args, self.clocks.wrapper(name))
            if config.runtimes.get(name) == runtime.CONTAINERD:
                node = self.nodes[name]
                node.agent_args += runtime.setup(testbed.node(name), setup.host, node)
            self.nodes[name].lifecycle = LifecycleProcess(
                name, setup.host, kubeconfig, workdir / name / "bitstreams", workdir / name
            )
        self.ops = Operations.of(self.nodes, config.nodes, f"{config.seed}/operations")
        self.injector = F.Injector(testbed, self.nodes, config.ready_within)
        self.injector.clock_steps = self.clocks
        asked = (*config.kinds, *config.fault_kinds)
        self.ext = extender.ExtenderRun.of(
            testbed, config.extender, config.nodes, self.nodes, workdir, config.ready_within, asked
        )
        self.injector.extender = self.ext
        self.tracker = Tracker()
        self.report = Report(config.seed, dict(config.nodes))
        self._seen: set[str] = set()
        self._t0 = time.monotonic()
        self._workdir = workdir

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> Report:
        try:
            self._start()
            self._run()
        finally:
            if self.ext is not None:
                self.report.extender = self.ext.as_json()
                self.ext.stop()
            for node in self.nodes.values():
                node.agent.stop()
                if node.lifecycle is not None:
                    node.lifecycle.stop()
                powerloss.unmount(node)
            self.clocks.stop()
        self.report.controller_handovers = self.clocks.controllers.transitions()
        return self.report

    def _start(self) -> None:
        install_crds(self.client)
        install_agent_access(self.client)  # the agents run with their own certificates
        apply_device_classes(self.client)
        self.client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
        self.testbed.wait_service_account(NAMESPACE)
        if nodes.FPGA_PROFILE in self.config.nodes.values():
            nodes.allow_bitstream(self.client)
        for node in self.nodes.values():
            powerloss.mount(node)
            node.start_agent()
            node.agent.wait_registered(self.config.ready_within)
        self.ops.start(self.config.ready_within)
        self.clocks.start(self.client, self.config.ready_within)
        if self.ext is not None:
            self.ext.start(self.client, NAMESPACE)

    def _run(self) -> None:
        cfg = self.config
        rng = random.Random(f"{cfg.seed}/workload")
        client = throttle.workload_client(self.testbed, self._workdir)
        workload = Workload(client, NAMESPACE, rng, cfg.kinds, max_live=cfg.max_live)
        self.ops.client = client
        workload.also.append(self.ops.step)
        self.injector.api.during = workload.step
        plan = fault_plan(cfg.seed, cfg)
        self.clocks.during = lambda: self._step_during(workload, F.CLOCK_STEP)
        if self.ext is not None:
            self.ext.during = lambda: self._step_during(workload, extender.EXTENDER_KILL)
        self._t0 = t0 = time.monotonic()
        last = "before-faults"
        self.report.faults = {k: Stats() for k in ("before-faults", *cfg.fault_kinds)}
        first_round = len(cfg.fault_kinds)
        injected = 0
        if cfg.long_outage > 0:
            self._long_outage(workload)
        while injected < first_round or time.monotonic() - t0 < cfg.duration:
            steps, fault = next(plan)
            for _ in range(steps):
                workload.step()
                self.report.steps += 1
                self.report.sequence.append(f"step {self.report.steps}")
                time.sleep(cfg.step_pause)
                self._check(last)
            self.report.sequence.append(f"{time.monotonic() - t0:.1f}s {fault.describe()}")
            stats = self.report.faults[fault.kind]
            stats.injected += 1
            injected += 1
            try:
                stats.recover_s.append(self.injector.inject(fault))
                stats.violations += [f"{fault.describe()}: {b}" for b in self.injector.broken]
                self.injector.broken = []
            except AssertionError as exc:
                stats.violations.append(
                    f"not-ready within {cfg.ready_within}s after {fault.describe()}: "
                    f"{str(exc)[:500]}"
                )
                break
            last = fault.kind
            self._check(last)
        self.report.elapsed_s = time.monotonic() - t0
        self.report.created = workload.created
        self._finish(workload)
        self.report.deleted = workload.deleted
        self.report.api_errors = workload.api_errors
        self.report.watches_expired = self.injector.watches_expired
        self.report.api_faults = self.injector.api.log

    def _step_during(self, workload: Workload, kind: str) -> None:
        """One workload step and check while a fault lasts (a clock step)."""
        workload.step()
        self.report.steps += 1
        self.report.sequence.append(f"step {self.report.steps}")
        time.sleep(self.config.step_pause)
        self._check(kind)

    def _long_outage(self, workload: Workload) -> None:
        """Steps until pods run on every kind that can, then the long outage."""
        deadline = time.monotonic() + self.config.settle_timeout
        while time.monotonic() < deadline:
            workload.step()
            self.report.steps += 1
            time.sleep(self.config.step_pause)
            self._check("before-faults")
            if len(self.report.running_seen) >= min(6, workload.max_live):
                break

        def step() -> int:
            workload.step()
            self.report.steps += 1
            return workload.api_errors

        def node_views() -> dict[str, NodeView]:
            return {n: self._node_view(node) for n, node in self.nodes.items()}

        self.report.sequence.append(f"long apiserver-outage for {self.config.long_outage:.0f}s")
        self.report.outage = outage.run(
            self.injector, self.config.long_outage, self._view, node_views, step
        )
        self._check("long-outage")

    def _finish(self, workload: Workload) -> None:
        cfg = self.config
        self.report.final += [f"{v.kind}: {v.detail}" for v in self.ops.finish()]
        self.report.operations = self.ops.as_json()
        # every pod Running, unschedulable or Failed with a reason (a device-plugin pod the
        # kubelet admitted while the plugin was not registered again after a restart fails
        # with UnexpectedAdmissionError: Kubernetes' own behaviour, reported under what the
        # workload saw), once the pods had time to settle
        deadline = time.monotonic() + cfg.settle_timeout
        stuck: list[str] = []
        while time.monotonic() < deadline:
            view = self._view()
            stuck = [
                f"{p['metadata']['name']}: {pod_reason(p) or 'no reason'}"
                for p in view.pods
                if (phase := (p.get("status") or {}).get("phase")) != "Running"
                and pod_reason(p) != "Unschedulable"
                and not (phase == "Failed" and pod_reason(p))
            ]
            if not stuck:
                break
            time.sleep(1)
        self.report.final += [f"pod not Running after {cfg.settle_timeout}s: {s}" for s in stuck]
        self._check("end")
        # nothing left once everything is deleted
        workload.delete_all()
        deadline = time.monotonic() + cfg.settle_timeout
        while not workload.drained() and time.monotonic() < deadline:
            time.sleep(1)
        view = self._view()
        if view.pods or view.claims:
            self.report.final.append(
                f"not drained after {cfg.settle_timeout}s: {len(view.pods)} pods, "
                f"{len(view.claims)} claims"
            )
        # The kubelet may unprepare a claim after its pod is gone from the API: the nodes get
        # leak_grace to forget what the API no longer has.
        deadline = time.monotonic() + cfg.leak_grace
        while True:
            left = check(
                view, Tracker(), set(self.nodes), leak_grace=-1, pending_grace=-1, afu=nodes.AFU
            )
            if not left or time.monotonic() > deadline:
                break
            time.sleep(1)
            view = self._view()
        self.report.final += [f"{v.kind}: {v.detail} (after {cfg.leak_grace}s)" for v in left]

    # -- observing -------------------------------------------------------------------------
    def _check(self, last: str) -> None:
        cfg = self.config
        view = self._view()
        ext = self.ext.check(view, self.tracker, cfg.leak_grace) if self.ext else []
        found: list[Violation] = ext + check(
            view,
            self.tracker,
            set(self.nodes),
            leak_grace=cfg.leak_grace,
            pending_grace=cfg.pending_grace,
            hw_grace=cfg.hw_grace,
            afu=nodes.AFU,
        )
        real = {n: node.agent.cdi_dir for n, node in self.nodes.items() if node.real_runtime}
        found += runtime.container_violations(
            self.testbed,
            view,
            self.tracker,
            real,
            grace=cfg.hw_grace,
            verified=self.report.containers_verified,
        )
        found += self.ops.check(view)
        stats = self.report.faults.setdefault(last, Stats())
        for text in [f"{v.kind}: {v.detail}" for v in found] + self._clock_violations():
            if text not in self._seen:
                self._seen.add(text)
                stats.violations.append(f"{text} (at {time.monotonic() - self._t0:.0f}s)")
        self._observe(view)

    def _clock_violations(self) -> list[str]:
        try:
            return [f"clock: {t}" for t in self.clocks.violations(self.client)]
        except API_ERRORS:
            return []  # the API server away: the next check looks again

    def _observe(self, view: ClusterView) -> None:
        """What the workload saw: pod states and reasons, claims prepared."""
        for p in view.pods:
            name = p["metadata"]["name"]
            phase = (p.get("status") or {}).get("phase") or "Pending"
            if phase == "Running":
                self.report.running_seen.add(name)
            else:
                self.report.not_running_seen.add((name, f"{phase}:{pod_reason(p) or '?'}"))
        prepared = [uid for n in view.nodes.values() for uid in n.checkpoint]
        self.report.prepared_seen.update(prepared)
        self.report.most_prepared = max(self.report.most_prepared, len(prepared))

    def _view(self) -> ClusterView:
        for attempt in range(20):
            try:
                claims = [as_dict(c) for c in self.client.list(ResourceClaim, namespace=NAMESPACE)]
                pods = [as_dict(p) for p in self.client.list(Pod, namespace=NAMESPACE)]
                views = {n: self._node_view(node) for n, node in self.nodes.items()}
                return ClusterView(claims, pods, views, time.monotonic())
            except (*API_ERRORS, ValueError):
                if attempt == 19:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def _node_view(self, node: F.Node) -> NodeView:
        """The node's checkpoint, specs and hardware (ValueError on a torn read: the caller
        reads again)."""
        a = node.agent
        fpga = self.config.nodes[node.name] == nodes.FPGA_PROFILE
        hw = hardware.read(node.host, a.state_dir, a.cdi_dir, fpga=fpga)
        return NodeView(node.name, a.checkpoint_claims(), cdi.spec_uids(a.cdi_dir), hw)
