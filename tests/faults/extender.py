"""The fault runner's extender side: ``kubeacc extender`` placing the ``extender`` workload kind,
the ``extender-kill`` fault, and the invariants of the extender's placements.

On when the run's :class:`tests.faults.runner.Config` carries a :class:`Plan` (made before the
testbed starts: kube-scheduler is configured with the extender, over mutual TLS, as
tests/extender/clusterlib.py does). The nodes of profile :data:`PROFILE` (``l4-extender``: the
``l4-pair`` host, two L4s of 23034 MiB) serve their GPUs through the agent's device plugin with
``shared: true`` (``kubeacc.io/gpu-memory`` and ``kubeacc.io/gpu-cores``), and a life-cycle agent
(thread) publishes their Accelerators, the extender's inventory. The extender is a process of
its own with its ServiceAccount's token. Its managed resources are only the shares', so the
``plugin`` kind's ``kubeacc.io/gpu`` pods never meet it.

- ``extender`` pods ask :data:`SHARE_MIB` MiB and :data:`SHARE_CORES` % of one GPU;
- ``extender-kill``: SIGKILL of the extender, a seeded pause of workload steps, started again;
  the recovery is the time until it is ready (listening, leading, watches synced);
- invariants (:meth:`ExtenderRun.check`, after every step): ``extender-placement``: a Running
  extender pod not on an extender node, or without a decision naming its node and at least the
  memory it asked; ``extender-overcommit``: a GPU given more memory than it has or more than 100 %
  of its cores, by the decisions of the pods bound or in the extender's own bookkeeping
  (``/state``); ``extender-bookkeeping``: the extender's holders of a node and the extender pods
  bound there disagree for longer than ``leak_grace`` (after an API server outage or a watch expiry
  its caches must list again); ``extender-exited``: the process ended without being killed;
  ``extender-down-silent``: a pod unbound for over :data:`DOWN_REASON_AFTER` s while the extender
  was down that gives no reason (once kube-scheduler marked a canary pod unschedulable before the
  kill: its pod watch lags after an API server restart); ``extender-not-back``: such a pod still
  unbound ``ready_within`` after the extender is ready again (not for a pod the extender itself
  refuses as unschedulable).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.wants import CORES, MAX_CORES, MEMORY, Decision, WantError
from kubeacc.crds.resources import as_dict
from kubeacc.testbed import Testbed
from kubeacc.testbed.extendertls import ExtenderPKI
from tests.extender.clusterlib import (
    Extender,
    extender_kubeconfig,
    limits_pod,
    scheduler_side,
)
from tests.faults.invariants import ClusterView, Tracker, Violation, pod_reason
from tests.testbed.helpers import eventually

#: What an API outage raises (as tests.faults.workload's, which imports this module).
API_ERRORS = (ApiError, httpx2.HTTPError, OSError)
PROFILE = "l4-extender"
KIND = "extender"
EXTENDER_KILL = "extender-kill"
#: What kube-scheduler sends the extender: shares only.
MANAGED = (MEMORY, CORES)
DP_CONFIG = "types:\n  gpu: {shared: true}\n"
#: An extender pod's share: two fit one L4.
SHARE_MIB = 8000
SHARE_CORES = 30
#: An L4's memory (the l4-pair host), when the extender's /state cannot be read.
L4_MIB = 23034
GPUS_PER_NODE = 2
#: The extender nodes' taint, which only extender pods tolerate: a ``plugin`` pod asking
#: ``kubeacc.io/gpu`` (which the shared device plugin serves too, and kube-scheduler places
#: without the extender here) would otherwise take a GPU the extender counts as free.
TAINT = {"key": "kubeacc.io/extender-shares", "value": "only", "effect": "NoSchedule"}
#: Seconds an unbound pod may wait for the scheduler's first attempt before it must give a
#: reason while the extender is down.
DOWN_REASON_AFTER = 5.0


@dataclass(frozen=True)
class Plan:
    """kube-scheduler's side of the extender, made before the testbed starts."""

    workdir: Path
    port: int
    pki: ExtenderPKI
    entries: tuple[dict[str, Any], ...]

    @classmethod
    def make(cls, workdir: Path) -> Plan:
        port, pki, entries = scheduler_side(workdir, MANAGED)
        return cls(workdir, port, pki, tuple(entries))


def scheduler_extenders(plan: Plan | None) -> list[dict[str, Any]]:
    """``Testbed.start(scheduler_extenders=...)`` for a run with (or without) the extender."""
    return list(plan.entries) if plan is not None else []


def agent_args(workdir: Path) -> tuple[str, ...]:
    """The ``kubeacc agent`` flags of an extender node: the device plugin, GPUs shared."""
    config = workdir / "dp.yaml"
    config.write_text(DP_CONFIG)
    return (f"--device-plugin-config={config}",)


def pod(name: str, namespace: str) -> Any:
    """An ``extender`` kind pod."""
    limits = {MEMORY: str(SHARE_MIB), CORES: str(SHARE_CORES)}
    toleration = {k: TAINT[k] for k in ("key", "value", "effect")} | {"operator": "Equal"}
    return limits_pod(name, namespace, limits, tolerations=[toleration])


def is_extender_pod(p: dict[str, Any]) -> bool:
    return str(p["metadata"]["name"]).endswith(f"-{KIND}")


def _phase(p: dict[str, Any]) -> str:
    return str((p.get("status") or {}).get("phase") or "Pending")


def _bound_live(p: dict[str, Any]) -> bool:
    """Bound, not terminal, not being deleted: its share is held."""
    return (
        bool((p.get("spec") or {}).get("nodeName"))
        and _phase(p) not in ("Succeeded", "Failed")
        and not p["metadata"].get("deletionTimestamp")
    )


def _decision(p: dict[str, Any]) -> Decision | None:
    text = (p["metadata"].get("annotations") or {}).get(DECISION_ANNOTATION)
    if not text:
        return None
    try:
        return Decision.from_json(text)
    except WantError:
        return None


def placement(view: ClusterView, nodes: set[str]) -> list[Violation]:
    """``extender-placement`` of the module doc."""
    out: list[Violation] = []
    for p in view.pods:
        if not is_extender_pod(p) or _phase(p) != "Running":
            continue
        name, node = p["metadata"]["name"], p["spec"].get("nodeName")
        d = _decision(p)
        if node not in nodes:
            out.append(Violation("extender-placement", f"{name} Running on {node}"))
        elif d is None or d.node != node:
            out.append(Violation("extender-placement", f"{name} on {node}: decision {d}"))
        elif sum(c.memory for c in d.containers) < SHARE_MIB:
            out.append(Violation("extender-placement", f"{name} on {node} got less: {d}"))
    return out


def overcommit(
    view: ClusterView, states: dict[str, dict[str, Any]], memory: dict[tuple[str, str], int]
) -> list[Violation]:
    """``extender-overcommit`` of the module doc: the pods' decisions, the extender's /state."""
    held: Counter[tuple[str, str]] = Counter()
    cores: Counter[tuple[str, str]] = Counter()
    for p in view.pods:
        d = _decision(p) if _bound_live(p) else None
        for c in d.containers if d else ():
            for bdf in c.devices:
                held[(d.node, bdf)] += c.memory  # type: ignore[union-attr]
                cores[(d.node, bdf)] += c.cores  # type: ignore[union-attr]
    out = [
        Violation("extender-overcommit", f"{n}/{b}: pods bound hold {mib} MiB of {total}")
        for (n, b), mib in sorted(held.items())
        if mib > (total := memory.get((n, b), L4_MIB))
    ]
    out += [
        Violation("extender-overcommit", f"{n}/{b}: pods bound hold {pct} % of its cores")
        for (n, b), pct in sorted(cores.items())
        if pct > MAX_CORES
    ]
    for node, state in sorted(states.items()):
        for bdf, gpu in sorted((state.get("gpus") or {}).items()):
            used = gpu.get("used") or {}
            if used.get("memory", 0) > gpu["memory"] or used.get("cores", 0) > MAX_CORES:
                out.append(
                    Violation("extender-overcommit", f"{node}/{bdf}: the extender counts {used}")
                )
    return out


def bookkeeping(
    view: ClusterView, states: dict[str, dict[str, Any]], tracker: Tracker, grace: float
) -> list[Violation]:
    """``extender-bookkeeping`` of the module doc."""
    out: list[Violation] = []
    for node, state in sorted(states.items()):
        on_node = [p for p in view.pods if is_extender_pod(p) and p["spec"].get("nodeName") == node]
        live = {p["metadata"]["uid"]: p["metadata"]["name"] for p in on_node if _bound_live(p)}
        bound = {p["metadata"]["uid"] for p in on_node}
        holders = set(state.get("holders") or [])
        for uid in sorted(set(live) - holders):
            if tracker.held(f"extender-missing:{node}:{uid}", view.at, grace):
                out.append(
                    Violation("extender-bookkeeping", f"{node}: {live[uid]} bound, not counted")
                )
        for uid in sorted(holders - bound):
            if tracker.held(f"extender-extra:{node}:{uid}", view.at, grace):
                out.append(
                    Violation("extender-bookkeeping", f"{node}: pod {uid} counted, not bound")
                )
    return out


@dataclass
class ExtenderRun:
    """The extender and its life-cycle agents for one run."""

    testbed: Testbed
    plan: Plan
    #: extender node -> (its host, its agent's kubeconfig, its work directory)
    nodes: dict[str, tuple[Path, Path, Path]]
    ready_within: float
    #: one workload step and check while the extender is down (set by the runner)
    during: Callable[[], None] | None = None
    extender: Extender | None = None
    down_since: float | None = None
    #: pod -> the reason it gave while the extender was down ("" none yet)
    waited_down: dict[str, str] = field(default_factory=dict)
    #: pod -> monotonic time the extender was ready again, for the pods still to bind
    to_bind: dict[str, float] = field(default_factory=dict)
    reasons_down: Counter[str] = field(default_factory=Counter)
    bound_after_return: int = 0
    #: per kill: seconds from the extender's return until its probe pod was bound
    probe_bound_s: list[float] = field(default_factory=list)
    probes_full: int = 0
    _late: list[Violation] = field(default_factory=list)
    kills: int = 0
    _memory: dict[tuple[str, str], int] = field(default_factory=dict)
    _client: Client | None = None
    _namespace: str = ""
    _scheduler_live: bool = False

    @classmethod
    def of(
        cls,
        testbed: Testbed,
        plan: Plan | None,
        profiles: Mapping[str, str],
        nodes: Mapping[str, Any],
        workdir: Path,
        ready_within: float,
        asked: Iterable[str],
    ) -> ExtenderRun | None:
        """The run's extender, when ``plan`` is given (``nodes``: name -> the runner's node, its
        ``host`` and ``agent.kubeconfig``); ``asked``: the run's workload and fault kinds, which
        name the extender's only with a plan and a node of :data:`PROFILE`."""
        ours = {n for n, p in profiles.items() if p == PROFILE}
        needs = sorted({KIND, EXTENDER_KILL} & set(asked))
        if needs and plan is None:
            raise ValueError(
                f"{', '.join(needs)} need the extender: Config(extender=Plan.make(...))"
            )
        if plan is None:
            return None
        if not ours:
            raise ValueError(f"the extender needs a node of profile {PROFILE}")
        places = {n: (nodes[n].host, nodes[n].agent.kubeconfig, workdir / n) for n in ours}
        return cls(testbed, plan, places, ready_within)

    def start(self, client: Client, namespace: str) -> None:
        self._client, self._namespace = client, namespace
        # The Accelerators the extender reads come from the runner's life-cycle agents
        # (tests/faults/lifecycle.py), one per node: a second one here would fight it.
        gpus = GPUS_PER_NODE * len(self.nodes)
        for node in self.nodes:
            taints = [t.to_dict() for t in (client.get(Node, node).spec.taints or [])]  # type: ignore[union-attr]
            client.patch(Node, node, {"spec": {"taints": [*taints, TAINT]}})
        for node in self.nodes:
            eventually(
                lambda n=node: _allocatable(client, n).get(MEMORY),  # type: ignore[misc]
                self.ready_within,
                f"{MEMORY} on {node}",
            )
        work = self.plan.workdir
        self.extender = Extender(
            extender_kubeconfig(self.testbed, client, work),
            self.plan.port,
            work / "extender.log",
            self.plan.pki,
        )
        self.extender.start()
        eventually(
            lambda: sum(len(self._state(n).get("gpus") or {}) for n in self.nodes) >= gpus,
            self.ready_within,
            "the extender's inventory of the extender nodes' GPUs",
            self.extender.log,
        )

    def stop(self) -> None:
        if self.extender is not None:
            self.extender.stop()

    # -- the fault -------------------------------------------------------------------------
    def inject(self, seconds: float) -> float:
        """SIGKILL, ``seconds`` of workload steps, start; the seconds until it is ready.

        A probe pod of the extender kind, made right after the kill, waits for certain while
        it is down: the seconds from the extender's return until it is bound are reported
        (``bound_after_return_s``), past ``ready_within`` a violation; it is deleted then."""
        assert self.extender is not None and self._client is not None
        # kube-scheduler's watches lag after an API server restart (docs/testing.md): the pods
        # waiting while the extender is down are held to a reason once it sees new pods again
        self._scheduler_live = self._wait_scheduler_live()
        self.extender.kill()
        self.kills += 1
        self.down_since = time.monotonic()
        probe = f"probe{self.kills}-{KIND}"
        with contextlib.suppress(*API_ERRORS):
            self._client.create(pod(probe, self._namespace))
        end = self.down_since + seconds
        while time.monotonic() < end:
            if self.during is not None:
                self.during()
            else:
                time.sleep(0.5)
        self._note_down()
        t0 = time.monotonic()
        self.extender.start()
        took = time.monotonic() - t0
        back = time.monotonic()
        self.down_since = None
        self.to_bind = {name: back for name in self.waited_down if name != probe}
        self.waited_down = {}
        self._probe_bound(probe, back)
        return took

    def _probe_bound(self, name: str, back: float) -> None:
        """Wait for the probe to be bound (or refused as full); then delete it."""
        assert self._client is not None
        p: dict[str, Any] = {}
        while time.monotonic() - back < self.ready_within:
            with contextlib.suppress(*API_ERRORS):
                p = as_dict(self._client.get(Pod, name, namespace=self._namespace))
            if p and p["spec"].get("nodeName"):
                self.probe_bound_s.append(round(time.monotonic() - back, 2))
                break
            if p and _full(p):
                self.probes_full += 1
                break
            time.sleep(0.2)
        else:
            self._late.append(
                Violation(
                    "extender-not-back",
                    f"{name} unbound {self.ready_within}s after the extender returned: "
                    f"{_scheduling_message(p) or 'no reason'}",
                )
            )
        with contextlib.suppress(*API_ERRORS):
            self._client.delete(Pod, name, namespace=self._namespace, grace_period=0)

    def _wait_scheduler_live(self) -> bool:
        """Wait (up to ``ready_within``) until kube-scheduler has tried a new pod: a canary no
        node can take, deleted once it is marked unschedulable."""
        assert self._client is not None
        name = f"canary-{self.kills}"
        canary = limits_pod(name, self._namespace, {}, nodeSelector={"kubeacc.io/none": "x"})
        deadline = time.monotonic() + self.ready_within
        seen = False
        while time.monotonic() < deadline and not seen:
            try:
                with contextlib.suppress(ApiError):
                    self._client.create(canary)
                p = as_dict(self._client.get(Pod, name, namespace=self._namespace))
                seen = bool(_scheduled(p))
            except API_ERRORS:
                pass
            time.sleep(0.5)
        with contextlib.suppress(*API_ERRORS):
            self._client.delete(Pod, name, namespace=self._namespace, grace_period=0)
        return seen

    def _note_down(self) -> None:
        """The extender pods unbound while it was down, and the reasons they give."""
        now = time.time()
        assert self._client is not None
        for p in (as_dict(x) for x in self._client.list(Pod, namespace=self._namespace)):
            if not is_extender_pod(p) or p["spec"].get("nodeName"):
                continue
            created = _epoch(p["metadata"].get("creationTimestamp"))
            if now - created < DOWN_REASON_AFTER:
                continue
            reason = _scheduling_message(p)
            self.waited_down[p["metadata"]["name"]] = reason
            self.reasons_down[_short(reason) if reason else "no reason"] += 1

    # -- the invariants --------------------------------------------------------------------
    def check(self, view: ClusterView, tracker: Tracker, grace: float) -> list[Violation]:
        out = placement(view, set(self.nodes))
        states = {} if self.down_since is not None else self._states()
        for node, state in states.items():
            for bdf, gpu in (state.get("gpus") or {}).items():
                self._memory[(node, bdf)] = int(gpu["memory"])
        out += overcommit(view, states, self._memory)
        out += bookkeeping(view, states, tracker, grace)
        proc = self.extender.proc if self.extender is not None else None
        if self.down_since is None and proc is not None and (code := proc.poll()) is not None:
            out.append(Violation("extender-exited", f"exit {code}"))
        out += self._silent_while_down(view)
        out += self._not_back(view)
        out += self._late
        self._late = []
        return out

    def _silent_while_down(self, view: ClusterView) -> list[Violation]:
        if self.down_since is None or not self._scheduler_live:
            return []
        out = []
        for p in view.pods:
            if not is_extender_pod(p) or p["spec"].get("nodeName"):
                continue
            waited = time.time() - _epoch(p["metadata"].get("creationTimestamp"))
            down = time.monotonic() - self.down_since
            if min(waited, down) > DOWN_REASON_AFTER and not pod_reason(p):
                name = p["metadata"]["name"]
                out.append(Violation("extender-down-silent", f"{name} unbound, no reason"))
        return out

    def _not_back(self, view: ClusterView) -> list[Violation]:
        pods = {p["metadata"]["name"]: p for p in view.pods}
        out = []
        for name, back in list(self.to_bind.items()):
            p = pods.get(name)
            if p is None or p["spec"].get("nodeName") or p["metadata"].get("deletionTimestamp"):
                self.bound_after_return += p is not None and bool(p["spec"].get("nodeName"))
                del self.to_bind[name]
            elif _full(p):
                del self.to_bind[name]  # the extender itself refused it: full
            elif time.monotonic() - back > self.ready_within:
                del self.to_bind[name]
                out.append(
                    Violation(
                        "extender-not-back",
                        f"{name} unbound {self.ready_within}s after the extender returned: "
                        f"{_scheduling_message(p) or 'no reason'}",
                    )
                )
        return out

    def _states(self) -> dict[str, dict[str, Any]]:
        out = {}
        for node in self.nodes:
            state = self._state(node)
            if state:
                out[node] = state
        return out

    def _state(self, node: str) -> dict[str, Any]:
        assert self.extender is not None
        try:
            return self.extender.state(node)
        except (OSError, ValueError):
            return {}  # not leading yet, or away: the next check reads again

    def as_json(self) -> dict[str, Any]:
        return {
            "kills": self.kills,
            "pods_unbound_while_down_by_reason": dict(self.reasons_down),
            "bound_after_return": self.bound_after_return,
            "probe_bound_after_return_s": self.probe_bound_s,
            "probes_refused_as_full": self.probes_full,
        }


def _allocatable(client: Client, node: str) -> dict[str, str]:
    status = client.get(Node, node).status
    return dict(status.allocatable or {}) if status else {}


def _scheduled(p: dict[str, Any]) -> dict[str, Any]:
    for c in (p.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return dict(c)
    return {}


def _scheduling_reason(p: dict[str, Any]) -> str:
    return str(_scheduled(p).get("reason") or "")


def _full(p: dict[str, Any]) -> bool:
    """The extender refused the pod: no GPU of a node has its share free."""
    return _scheduling_reason(p) == "Unschedulable" and "no GPU" in _scheduling_message(p)


def _scheduling_message(p: dict[str, Any]) -> str:
    c = _scheduled(p)
    return f"{c.get('reason')}: {c.get('message') or ''}" if c else ""


def _short(reason: str) -> str:
    """A reason without pod names or addresses, for counting."""
    head = reason.split(": ", 1)[0]
    return f"{head}: connection refused" if "connection refused" in reason else head


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return time.time()
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
