"""The ``clock-step`` fault: one node's, or one controller replica's, wall clock stepped (NTP)
and stepped back to true after a seeded hold, while the workload goes on.

What runs under the stepped clocks (tests/faults/clock.py): every node's agent, with its probe and
metrics port, its telemetry every 2 s and health taints on (as a chart with metrics runs it), and
the controller's two replicas (tests/faults/controllers.py), each replica with a clock of its own.
An AcceleratorPolicy gives every device a ``remediation`` section, so that the remediation loop is
live.

What must hold, checked after every workload step (:meth:`ClockSteps.violations`), whatever fault
came last: no two controller replicas acting at once; no fault reported, no remediation started and
no health taint on a device: the synthetic hardware never faults in a run, so any is the clock's
doing. While the stepped process can reach the API server (a step back of less than the
certificates' 5 minutes), ``kubeacc status``'s controller check passes at every workload step: a
leader whose clock is behind still leads. The checks of tests/faults/invariants.py (no claim
unprepared, nothing given twice, nothing leaked) hold as for every fault, and after the step back
every component is ready within the runner's ``ready_within``: the node Ready and its agent's
/readyz answering 200, or both controller replicas ready and one of them acting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.contracts.names import DOMAIN, HEALTH_TAINT
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.status import cluster
from kubeacc.testbed import Testbed
from tests.faults import clock
from tests.faults.controllers import IDENTITIES, LEASE_NAMESPACE, Controllers, free_port, http_get

#: The targets of a controller step, resolved when it is injected: the replica acting last, or
#: the other one.
LEADER = "controller-leader"
STANDBY = "controller-standby"

if TYPE_CHECKING:
    from tests.faults.faults import Fault, Node

REMEDIATION_POLICY = "faults-remediation"
REMEDIATION_LABEL = f"{DOMAIN}/remediation"
CORDONED_BY = f"{DOMAIN}/cordoned-by"
FAULT_ANNOTATION = f"{DOMAIN}/remediation-fault"


class ClockSteps:
    """The stepped clocks of a run, the controller's replicas and the checks of a step."""

    def __init__(self, testbed: Testbed, workdir: Path, nodes: list[str]) -> None:
        self.testbed = testbed
        self.clocks = clock.Clocks(workdir / "clocks", [*nodes, *IDENTITIES])
        self.ports = {n: free_port() for n in nodes}
        wrappers = {i: self.clocks[i].wrapper() for i in IDENTITIES}
        self.controllers = Controllers(testbed.kubeconfig, workdir / "controllers", wrappers)
        self.status_failures: list[str] = []
        #: one workload step and check: what goes on while a clock is stepped
        self.during: Callable[[], None] = lambda: time.sleep(1)

    # -- what the processes run with -------------------------------------------------------
    def wrapper(self, node: str) -> tuple[str, ...]:
        return self.clocks[node].wrapper()

    def agent_args(self, node: str) -> tuple[str, ...]:
        return (
            f"--metrics-address=127.0.0.1:{self.ports[node]}",
            "--telemetry-interval=2",
            "--health-taints",
            "--health-taint-hold=30",
        )

    def start(self, client: Client, timeout: float) -> None:
        client.create(from_dict(_remediation_policy()))
        self.controllers.start(timeout)

    def stop(self) -> None:
        self.controllers.stop()

    # -- the fault ---------------------------------------------------------------------------
    def inject(self, fault: Fault, nodes: dict[str, Node], ready_timeout: float) -> float:
        """Step ``fault.node``'s clock by ``fault.offset`` for ``fault.seconds`` of workload,
        step it back; the seconds until its component is ready again."""
        target = self._replica(fault.node)
        c = self.clocks[target]
        c.step(fault.offset)
        try:
            end = time.monotonic() + fault.seconds
            while time.monotonic() < end:
                self.during()
                if fault.offset >= clock.REACHABLE:
                    self._status(fault)
        finally:
            c.step(0)
        t0 = time.monotonic()
        if target in IDENTITIES:
            self.controllers.wait_ready(ready_timeout)
        else:
            self.testbed.wait_node_ready(fault.node, timeout=ready_timeout)
            self._agent_ready(nodes[fault.node], ready_timeout)
        return time.monotonic() - t0

    def _replica(self, target: str) -> str:
        """The replica a controller step hits (a node's name stays as it is)."""
        if target not in (LEADER, STANDBY):
            return target
        leader = self.controllers.leader()
        return leader if target == LEADER else next(i for i in IDENTITIES if i != leader)

    def _agent_ready(self, node: Node, timeout: float) -> None:
        url = f"http://127.0.0.1:{self.ports[node.name]}/readyz"
        deadline = time.monotonic() + timeout
        status, body = 0, ""
        while time.monotonic() < deadline:
            status, body = http_get(url)
            if status == 200:
                return
            time.sleep(0.5)
        raise AssertionError(
            f"agent of {node.name} not ready after {timeout}s ({status}: {body[:300]}):\n"
            f"{node.agent.log()[-2000:]}"
        )

    def _status(self, fault: Fault) -> None:
        """``kubeacc status``'s controller check, as an admin runs it, must pass."""
        client = self.testbed.client(field_manager="kubeacc-faults")
        check = cluster.controller(client, LEASE_NAMESPACE)
        if check.failed:
            self.status_failures.append(f"kubeacc status during {fault.describe()}: {check.detail}")

    # -- the checks --------------------------------------------------------------------------
    def violations(self, client: Client) -> list[str]:
        """What a clock step must not cause (module docstring), seen now."""
        found = self.controllers.take_violations()
        found += self.status_failures
        self.status_failures = []
        for acc in (as_dict(a) for a in client.list(Accelerator)):
            name = acc["metadata"]["name"]
            notes = acc["metadata"].get("annotations") or {}
            fault = (acc.get("status") or {}).get("lastFault")
            if fault:
                found.append(f"fault reported on healthy hardware: {name}: {fault}")
            if notes.get(FAULT_ANNOTATION) or str(notes.get(CORDONED_BY, "")).startswith(
                "remediation"
            ):
                found.append(f"remediation of a healthy device: {name}: {notes}")
        for op in client.list(AcceleratorOperation, namespace="*"):
            meta = as_dict(op)["metadata"]
            if (meta.get("labels") or {}).get(REMEDIATION_LABEL) == "true":
                found.append(f"remediation operation {meta['namespace']}/{meta['name']}")
        for s in client.list(ResourceSlice):
            d = as_dict(s)
            for dev in d["spec"].get("devices") or []:
                for taint in dev.get("taints") or []:
                    if taint.get("key") == HEALTH_TAINT:
                        found.append(
                            f"health taint on a healthy device: {d['spec'].get('pool', {})}"
                            f"/{dev['name']}: {taint}"
                        )
        return found


def _remediation_policy() -> dict[str, Any]:
    """Every device under a remediation section that acts on the first report of any fault
    (``Taint``: the device is cordoned, nothing drained)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AcceleratorPolicy",
        "metadata": {"name": REMEDIATION_POLICY},
        "spec": {
            "selector": {},
            "remediation": {
                "rules": [
                    {"event": "HealthFailing", "failures": 1, "action": "Taint"},
                    {"event": "Xid", "xids": [48, 63, 64, 74, 79, 94, 95], "action": "Taint"},
                    {"event": "EccUncorrectable", "action": "Taint"},
                    {"event": "FallenOffBus", "action": "Taint"},
                    {"event": "LinkDown", "action": "Taint"},
                ],
                "perDevice": {"max": 1, "windowSeconds": 3600},
                "backoffSeconds": 3600,
            },
        },
    }


def fault(rng: random.Random, nodes: list[str]) -> Fault:
    """A seeded ``clock-step`` of one of ``nodes``' agents or of a controller replica."""
    from tests.faults.faults import CLOCK_STEP, Fault

    step = clock.plan(rng, sorted([*nodes, LEADER, STANDBY]))
    return Fault(CLOCK_STEP, node=step.target, seconds=step.hold, offset=step.offset)
