"""AcceleratorOperations in the fault runner: a workload step that makes them on devices no
claim holds and deletes the finished ones, and the invariants they are held to.

Targets (:func:`targets`): on a ``dgx-h100`` node two whole GPUs (neither the memory-shared one
nor the MIG one), on a ``kunlun-xpu`` node two XPUs, each ``Reset`` or ``Power`` ``Cycle``; on
the FPGA node both cards, ``Program`` with the allowed bitstream (tests/faults/nodes.py) or
``Reset``. At most one live operation per target, so that what the host records between an
operation's creation and the moment it was seen finished is that operation's. Operations are
made in ``kube-system``, the controller replicas' Lease namespace (their admin namespace).

Invariants (each a :class:`~tests.faults.invariants.Violation`):

- ``operation-twice``: the host recorded more than one action of the life-cycle agent on the
  target during the operation (the synthetic kernel's record, kubeacc/synthetic/kernel.py,
  filtered to the life-cycle agents' process ids);
- ``operation-outcome``: Succeeded without one action, Failed with no reason, Failed with an
  action although nothing ran (any reason but ``AgentRestarted``: the agent died during it), or
  an action that ran reported as the controller's ``Timeout`` (a result lost);
- ``operation-lost``: an operation gone from the API before it finished, or not finished
  :data:`FINISH_WITHIN_S` after the faults ended (the end of the run);
- ``operation-unattributed``: an action of a life-cycle agent outside every operation's life;
- ``operation-on-held-device``: an action on a device a prepared claim held both at the check
  before and at the check after it;
- ``accelerator-afu``: an FPGA Accelerator's AFU not the one its card carries for longer than
  :data:`AGREE_GRACE_S` (the life-cycle agent rediscovers every second).
"""

from __future__ import annotations

import functools
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.discovery import discover
from kubeacc.synthetic.fpga import ZERO_ID
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import actions
from tests.faults.invariants import ClusterView, Violation
from tests.faults.lifecycle import LifecycleProcess
from tests.faults.nodes import BITSTREAM, DIGEST, FPGA_PROFILE
from tests.faults.workload import API_ERRORS

if TYPE_CHECKING:
    from tests.faults.faults import Node

NAMESPACE = "kube-system"
LABEL = "kubeacc-faults/operation"
#: the operations' spec.timeoutSeconds
TIMEOUT_S = 300
#: every operation finished within this after the last fault (the end of the run)
FINISH_WITHIN_S = 120.0
AGREE_GRACE_S = 60.0
MAX_LIVE = 3
TERMINAL = ("Succeeded", "Failed")
#: the controller's condition of an operation's end
ENDED = ("Complete", "Failed")
#: an FPGA's partial reconfiguration takes this long on the fault run's FPGA node (so that a
#: kill can fall in the middle of one)
PR_SECONDS = "1.0"
#: whole devices that may be targets, per profile: (device name, actions)
PROFILE_TARGETS = {
    "dgx-h100": (
        ("gpu-0000-1d-00-0", ("Reset", "Power")),
        ("gpu-0000-3d-00-0", ("Reset", "Power")),
    ),
    "kunlun-xpu": (
        ("xpu-0000-3d-00-0", ("Reset", "Power")),
        ("xpu-0000-b3-00-0", ("Reset", "Power")),
    ),
}


@dataclass(frozen=True)
class Target:
    node: str
    device: str
    #: the host record's name of it: the PCI function, or the FPGA's port
    key: str
    actions: tuple[str, ...]
    host: Path
    #: an FPGA's port (its afu_id)
    port: str = ""
    #: its PCI function (an FPGA's reset is recorded under it, its programming under the port)
    bdf: str = ""

    def recorded(self, action: dict[str, Any]) -> bool:
        """Whether the host's record of ``action`` is one on this device."""
        return action.get("device") in (self.key, self.bdf)


@dataclass
class Op:
    name: str
    target: Target
    action: str
    #: the life-cycle agents' actions on the target recorded before it was made / when seen
    #: finished
    before: int
    created: float
    after: int | None = None
    phase: str = ""
    reason: str = ""
    took: float = 0.0
    #: the API server answered its create (an outage may cut the answer off: made again)
    created_ok: bool = False
    spec: dict[str, Any] = field(default_factory=dict)


def targets(node: str, profile: str, host: Path) -> list[Target]:
    """The devices of ``node`` the workload runs operations on."""
    found = {d.name: d for d in discover(SyntheticHost(host)).devices}
    if profile == FPGA_PROFILE:
        (host / ".synthetic").mkdir(exist_ok=True)
        (host / ".synthetic" / "fpga-pr-seconds").write_text(PR_SECONDS)
        return [
            Target(
                node,
                d.name,
                d.fpga.ports[0],
                ("Program", "Program", "Reset"),
                host,
                d.fpga.ports[0],
                d.pci.bus_id,
            )
            for d in sorted(found.values(), key=lambda d: d.name)
            if d.fpga is not None and d.fpga.ports and d.pci is not None
        ]
    out = []
    for name, acts in PROFILE_TARGETS.get(profile, ()):
        dev = found[name]
        assert dev.pci is not None
        out.append(Target(node, name, dev.pci.bus_id, acts, host, bdf=dev.pci.bus_id))
    return out


@dataclass
class Operations:
    #: the workload's client (set when the workload starts)
    client: Client | None
    rng: random.Random
    targets: list[Target]
    #: node -> its life-cycle agent
    agents: dict[str, LifecycleProcess]
    ops: dict[str, Op] = field(default_factory=dict)
    done: list[Op] = field(default_factory=list)
    found: list[Violation] = field(default_factory=list)
    api_errors: int = 0
    _next: int = 0
    #: host root -> actions of its record already checked against the claims
    _seen_actions: dict[Path, int] = field(default_factory=dict)
    #: (node, device) -> claim UIDs prepared on it, at the last check
    _held: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    #: Accelerator -> since when its AFU is not its card's
    _disagree: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: dict[str, Node], profiles: dict[str, str], seed: str) -> Operations:
        """The operations of a run on ``nodes`` (each with its life-cycle agent)."""
        agents = {n: node.lifecycle for n, node in nodes.items() if node.lifecycle is not None}
        found = [t for n, node in sorted(nodes.items()) for t in targets(n, profiles[n], node.host)]
        ops = cls(None, random.Random(seed), found, agents)
        for name, agent in agents.items():
            agent.busy = functools.partial(ops.busy, name)
        return ops

    def start(self, timeout: float) -> None:
        """Start every node's life-cycle agent; return once each is ready."""
        for agent in self.agents.values():
            agent.start()
        for agent in self.agents.values():
            agent.wait_ready(timeout)

    @property
    def api(self) -> Client:
        assert self.client is not None, "the workload has not started"
        return self.client

    # -- the workload step -------------------------------------------------------------------
    def step(self) -> None:
        """Finished operations recorded and deleted; maybe one made (seeded)."""
        try:
            self._reap()
            if len(self.ops) < MAX_LIVE and self.rng.random() < 0.5:
                free = self._free_targets()
                if free:
                    self._create(self.rng.choice(free))
        except API_ERRORS:
            self.api_errors += 1

    def busy(self, node: str) -> None:
        """An operation on ``node`` now, when one of its targets is free (a kill's prelude)."""
        try:
            free = [t for t in self._free_targets() if t.node == node]
            if free:
                self._create(self.rng.choice(free))
        except API_ERRORS:
            self.api_errors += 1

    def _create(self, target: Target) -> None:
        self._next += 1
        action = self.rng.choice(target.actions)
        name = f"op{self._next}-{action.lower()}-{target.node}"
        spec: dict[str, Any] = {
            "action": action,
            "targets": [f"{target.node}-{target.device}"],
            "timeoutSeconds": TIMEOUT_S,
        }
        if action == "Power":
            spec["power"] = {"state": "Cycle"}
        if action == "Program":
            spec["program"] = {"bitstream": BITSTREAM, "sha256": DIGEST}
        op = Op(name, target, action, self._count(target), time.monotonic())
        self.ops[name] = op
        self._send(op, spec)

    def _send(self, op: Op, spec: dict[str, Any]) -> None:
        op.spec = spec
        body = from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorOperation",
                "metadata": {"name": op.name, "namespace": NAMESPACE, "labels": {LABEL: "1"}},
                "spec": spec,
            }
        )
        try:
            self.api.create(body, namespace=NAMESPACE)
        except ApiError as exc:
            if exc.status.code != 409:  # made before an outage cut the answer off
                raise
        op.created_ok = True

    def _free_targets(self) -> list[Target]:
        """Targets with no live operation whose device no claim holds and no user uses."""
        busy = {op.target for op in self.ops.values()}
        held: set[tuple[str, str]] = set()
        for c in self.api.list(ResourceClaim, namespace="*"):
            alloc = (as_dict(c).get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results") or []:
                held.add((r.get("pool", ""), r.get("device", "")))
        used = {
            a["metadata"]["name"]
            for a in map(as_dict, self.api.list(Accelerator))
            if (a.get("status") or {}).get("allocatedTo")
        }
        return [
            t
            for t in self.targets
            if t not in busy
            and not any(p == t.node and d.startswith(t.device) for p, d in held)
            and f"{t.node}-{t.device}" not in used
        ]

    def _reap(self) -> None:
        listed = {
            o["metadata"]["name"]: o
            for o in map(
                as_dict,
                self.api.list(AcceleratorOperation, namespace=NAMESPACE, labels={LABEL: "1"}),
            )
        }
        for name, op in list(self.ops.items()):
            if not op.created_ok:
                self._send(op, op.spec)
            obj = listed.get(name)
            if obj is None:
                if time.monotonic() - op.created > 30:  # a create the API may not show yet
                    self.found.append(Violation("operation-lost", f"{name}: gone unfinished"))
                    self.ops.pop(name)
                continue
            status = obj.get("status") or {}
            if status.get("phase") not in ("Succeeded", "Failed"):
                if time.monotonic() - op.created > TIMEOUT_S + 60:
                    self.found.append(
                        Violation(
                            "operation-lost", f"{name}: {status.get('phase')} past its timeout"
                        )
                    )
                    self.ops.pop(name)
                continue
            self._finished(op, status)
            try:
                self.api.delete(AcceleratorOperation, name, namespace=NAMESPACE)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise

    def _finished(self, op: Op, status: dict[str, Any]) -> None:
        op.after = self._count(op.target)
        op.took = time.monotonic() - op.created
        results = [r for r in status.get("results") or [] if r.get("phase") in TERMINAL]
        ended = [c for c in status.get("conditions") or [] if c.get("type") in ENDED]
        op.phase = str(status.get("phase"))
        op.reason = str((results or ended or [{}])[0].get("reason") or "")
        self.ops.pop(op.name)
        self.done.append(op)
        ran = op.after - op.before
        what = f"{op.name} ({op.phase}/{op.reason}, {ran} actions on the host)"
        if ran > 1:
            self.found.append(Violation("operation-twice", what))
        elif op.phase == "Succeeded" and ran != 1:
            self.found.append(Violation("operation-outcome", what))
        elif op.phase == "Failed" and not op.reason:
            self.found.append(Violation("operation-outcome", f"{what}: no reason"))
        elif op.phase == "Failed" and ran == 1 and op.reason != "AgentRestarted":
            self.found.append(Violation("operation-outcome", f"{what}: ran, reported not"))

    def _count(self, target: Target) -> int:
        pids = self.agents[target.node].pids
        return sum(1 for a in actions(target.host) if target.recorded(a) and a.get("pid") in pids)

    # -- the checks --------------------------------------------------------------------------
    def check(self, view: ClusterView) -> list[Violation]:
        """What was found since the last check, and the checks against ``view``."""
        found, self.found = self.found, []
        held: dict[tuple[str, str], set[str]] = {}
        for node, nv in view.nodes.items():
            for uid, claim in nv.checkpoint.items():
                for dev in claim.get("devices") or []:
                    held.setdefault((node, str(dev.get("device"))), set()).add(uid)
        for host, node in {(t.host, t.node) for t in self.targets}:
            record = actions(host)
            new = record[self._seen_actions.get(host, 0) :]
            self._seen_actions[host] = len(record)
            names = {k: t.device for t in self.targets if t.host == host for k in (t.key, t.bdf)}
            for a in new:
                if a.get("pid") not in self.agents[node].pids:
                    continue
                device = names.get(str(a.get("device")), str(a.get("device")))
                both = {
                    uid
                    for (n, d), uids in self._held.items()
                    if n == node and d.startswith(device)
                    for uid in uids & held.get((n, d), set())
                }
                if both:
                    found.append(
                        Violation(
                            "operation-on-held-device",
                            f"{a.get('action')} of {node}/{device} while claims {sorted(both)} "
                            "held it",
                        )
                    )
        self._held = held
        found += self._afu_agreement(view.at)
        return found

    def _afu_agreement(self, now: float) -> list[Violation]:
        fpgas = [t for t in self.targets if t.port]
        if not fpgas:
            return []
        try:
            accs = {a["metadata"]["name"]: a for a in map(as_dict, self.api.list(Accelerator))}
        except API_ERRORS:
            return []
        out = []
        for t in fpgas:
            name = f"{t.node}-{t.device}"
            on_card = (t.host / "sys/bus/platform/devices" / t.port / "afu_id").read_text().strip()
            want = None if on_card == ZERO_ID else on_card
            status = (accs.get(name) or {}).get("status") or {}
            says = ((status.get("device") or {}).get("fpga") or {}).get("afuId")
            if says == want:
                self._disagree.pop(name, None)
                continue
            since = self._disagree.setdefault(name, now)
            if now - since > AGREE_GRACE_S:
                out.append(
                    Violation("accelerator-afu", f"{name} says AFU {says}, the card carries {want}")
                )
                self._disagree[name] = now  # reported once per grace
        return out

    # -- the end -----------------------------------------------------------------------------
    def finish(self) -> list[Violation]:
        """Every operation finished within :data:`FINISH_WITHIN_S`, and every action of a
        life-cycle agent one operation's."""
        deadline = time.monotonic() + FINISH_WITHIN_S
        while self.ops and time.monotonic() < deadline:
            self.step_reap_only()
            time.sleep(1)
        found = [
            Violation(
                "operation-lost", f"{n}: not finished {FINISH_WITHIN_S:.0f}s after the faults"
            )
            for n in sorted(self.ops)
        ]
        for t in self.targets:
            ops = [o for o in self.done if o.target == t]
            attributed = sum((o.after or 0) - o.before for o in ops)
            total = self._count(t)
            if total != attributed:
                found.append(
                    Violation(
                        "operation-unattributed",
                        f"{t.node}/{t.device}: {total} actions on the host, {attributed} "
                        "within operations",
                    )
                )
        return found + self.found

    def step_reap_only(self) -> None:
        try:
            self._reap()
        except API_ERRORS:
            self.api_errors += 1

    def as_json(self) -> dict[str, Any]:
        took = [o.took for o in self.done]
        return {
            "created": dict(Counter(o.action for o in [*self.done, *self.ops.values()])),
            "finished": dict(Counter(f"{o.phase}:{o.reason}" for o in self.done)),
            "actions_on_hosts": sum((o.after or 0) - o.before for o in self.done),
            "seconds_to_finish": {
                "p50": round(statistics.median(took), 1) if took else None,
                "max": round(max(took), 1) if took else None,
            },
            "lifecycle_kills": sum(a.kills for a in self.agents.values()),
            "api_errors": self.api_errors,
        }
