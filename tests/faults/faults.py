"""The faults the runner injects, each a real one on the testbed, and the wait until every
component is ready again.

- ``agent-kill``: SIGKILL of one node's ``kubeacc agent`` process, started again at once.
- ``kubelet-restart``: one node's kubelet stopped and started (its CRI runtime and pods stay).
- ``apiserver-outage``: kube-apiserver stopped for ``seconds``, then started on the same etcd.
- ``node-reboot``: one node loses power as a reboot does: agent killed, kubelet and its CRI
  runtime stopped (containers gone), the synthetic host's hardware state back to boot
  (``mig_state.reboot``: MIG instances gone; GPU compute modes and time slices back to their
  defaults; the FPGAs' bitstreams lost, or kept when ``keeps_bitstreams``, as flash-backed
  cards may), the node's CDI directory emptied as ``/var/run`` is; the state directory
  (``/var/lib/kubeacc``) and the kubelet's root are kept. Then runtime, kubelet and agent start
  again.
- ``power-loss``: a node reboot whose power was cut: the node's state and CDI directories live
  on the lazy file system for the run (tests/faults/powerloss.py): at a random moment while the
  agent runs it is SIGKILLed and every write neither directory had made durable is dropped
  (unflushed file data, unflushed directory entries); then the reboot above. A plain
  ``node-reboot`` unmounts them cleanly (every write kept).
- ``runtime-restart``: the node's CRI runtime process stopped and started under a running
  kubelet. The testbed's fake CRI runtime keeps its containers in memory only, so this is a
  runtime crash that loses them: the kubelet makes the pods' sandboxes again and asks for their
  claims again (NodePrepareResources of prepared claims). On a containerd node this fault,
  ``node-reboot`` and ``power-loss`` are the real runtime's (tests/faults/runtime.py).
- ``watch-expiry``: the API server stopped, a write straight to etcd and an etcd compaction at
  that revision (through etcd's own client API), the API server started again: every client's
  watch resumes from a compacted revision and is answered ``410 Gone`` (too old resource
  version), so each must list again.
- ``lifecycle-kill``: SIGKILL of one node's ``kubeacc lifecycle-agent`` at a seeded instant
  after an operation was made to run on that node, started again (tests/faults/lifecycle.py).
  Node reboots and power losses kill it too, and start it again after the node agent.
- ``clock-step``: one node's agent's, or the controller replicas', wall clock stepped ahead or
  behind under libfaketime for a seeded while of workload, then back to true
  (tests/faults/clockstep.py).
- ``extender-kill``: SIGKILL of ``kubeacc extender``, a seeded pause of workload steps, started
  again (tests/faults/extender.py).

Each :meth:`Injector.inject` returns the seconds from the end of the fault (the process started
again, the API server restarted) until every component of the node, or of the cluster for an
outage, is ready: the node Ready and the agent registered with its kubelet again.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube import ApiError
from lightkube.resources.core_v1 import ConfigMap

from kubeacc.synthetic import mig_state
from kubeacc.synthetic.fpga import ZERO_ID
from kubeacc.synthetic.tools import hoststate
from kubeacc.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.faults import extender, lifecycle, powerloss, runtime, throttle

if TYPE_CHECKING:
    from tests.faults.clockstep import ClockSteps
    from tests.faults.extender import ExtenderRun

AGENT_KILL = "agent-kill"
KUBELET_RESTART = "kubelet-restart"
APISERVER_OUTAGE = "apiserver-outage"
NODE_REBOOT = "node-reboot"
POWER_LOSS = "power-loss"
RUNTIME_RESTART = "runtime-restart"
WATCH_EXPIRY = "watch-expiry"
CLOCK_STEP = "clock-step"
KINDS = (
    AGENT_KILL,
    KUBELET_RESTART,
    APISERVER_OUTAGE,
    NODE_REBOOT,
    POWER_LOSS,
    RUNTIME_RESTART,
    WATCH_EXPIRY,
    CLOCK_STEP,
    lifecycle.LIFECYCLE_KILL,
    *throttle.KINDS,
    extender.EXTENDER_KILL,
)
#: The faults that hit the API server or the extender (no node).
CLUSTER_KINDS = (APISERVER_OUTAGE, WATCH_EXPIRY, *throttle.KINDS, extender.EXTENDER_KILL)

REGISTERED = "kubelet registered plugin kubeacc.io"


@dataclass(frozen=True)
class Fault:
    kind: str
    #: the node it hits ("" for the API server)
    node: str = ""
    #: how long the API server stays down
    seconds: float = 0.0
    #: a reboot: the FPGAs keep their bitstreams
    keeps_bitstreams: bool = False
    #: a clock step: seconds the clock is put ahead (negative: behind)
    offset: int = 0

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        kept = " (bitstreams kept)" if self.keeps_bitstreams else ""
        step = f" by {self.offset:+d}s" if self.offset else ""
        held = f" for {self.seconds:.0f}s" if self.seconds else ""
        return f"{self.kind}{where}{step}{held}{kept}"


@dataclass
class Node:
    """One node of the run: its agent process and synthetic host."""

    name: str
    host: Path
    agent: AgentProcess
    #: extra ``kubeacc agent`` flags (tests.faults.nodes)
    agent_args: tuple[str, ...] = ()
    #: the command prefix the agent runs under (its stepped clock)
    wrapper: tuple[str, ...] = ()
    #: its kubelet runs on containerd + runc (tests/faults/runtime.py)
    real_runtime: bool = False
    #: its ``kubeacc lifecycle-agent`` (tests/faults/lifecycle.py)
    lifecycle: lifecycle.LifecycleProcess | None = None

    def registrations(self) -> int:
        return self.agent.log().count(REGISTERED)

    def start_agent(self, *, apply_classes: bool = False) -> None:
        wrapper = list(self.wrapper) or None
        self.agent.start(extra=list(self.agent_args), apply_classes=apply_classes, wrapper=wrapper)


class Injector:
    def __init__(self, testbed: Testbed, nodes: dict[str, Node], ready_timeout: float) -> None:
        self.testbed = testbed
        self.nodes = nodes
        self.ready_timeout = ready_timeout
        #: watch-expiry faults after which a watch from before was answered 410 Gone
        self.watches_expired = 0
        #: the stepped clocks (set by the runner)
        self.clock_steps: ClockSteps | None = None
        #: the extender (set by the runner when the run has it)
        self.extender: ExtenderRun | None = None
        logs = lambda: {n: node.agent.log() for n, node in nodes.items()}  # noqa: E731
        self.api = throttle.ApiFaults(testbed, logs, ready_timeout)
        #: what the last fault broke that it found itself (tests/faults/runtime.py)
        self.broken: list[str] = []

    def inject(self, fault: Fault) -> float:
        """Inject ``fault``; return the seconds to recover (AssertionError past the timeout)."""
        if fault.kind == AGENT_KILL:
            return self._agent_kill(self.nodes[fault.node])
        if fault.kind == KUBELET_RESTART:
            return self._kubelet_restart(self.nodes[fault.node])
        if fault.kind == APISERVER_OUTAGE:
            return self._apiserver_outage(fault.seconds)
        if fault.kind in (NODE_REBOOT, POWER_LOSS):
            power_cut = fault.kind == POWER_LOSS
            return self._reboot(self.nodes[fault.node], fault.keeps_bitstreams, power_cut)
        if fault.kind == RUNTIME_RESTART:
            return self._runtime_restart(self.nodes[fault.node])
        if fault.kind == WATCH_EXPIRY:
            return self._watch_expiry()
        if fault.kind == CLOCK_STEP and self.clock_steps is not None:
            return self.clock_steps.inject(fault, self.nodes, self.ready_timeout)
        if fault.kind == lifecycle.LIFECYCLE_KILL and (lc := self.nodes[fault.node].lifecycle):
            return lifecycle.kill_fault(lc, self.ready_timeout)
        if fault.kind in throttle.KINDS:
            return self.api.inject(fault.kind, fault.seconds)
        if fault.kind == extender.EXTENDER_KILL and self.extender is not None:
            return self.extender.inject(fault.seconds)
        raise ValueError(f"unknown fault {fault.kind!r}")

    def _agent_kill(self, node: Node) -> float:
        node.agent.kill()
        t0 = time.monotonic()
        node.start_agent()
        node.agent.wait_log(REGISTERED, self.ready_timeout, count=node.registrations() + 1)
        return time.monotonic() - t0

    def _kubelet_restart(self, node: Node) -> float:
        before = node.registrations()
        kubelet = self.testbed.node(node.name)
        kubelet.stop_kubelet()
        t0 = time.monotonic()
        kubelet.launch(self.ready_timeout)
        self._node_ready(node, before)
        return time.monotonic() - t0

    def _apiserver_outage(self, seconds: float) -> float:
        self.testbed.stop_apiserver()
        time.sleep(seconds)
        return self.apiserver_back()

    def apiserver_back(self) -> float:
        """Start the API server again; the seconds until it and every node are ready."""
        t0 = time.monotonic()
        self.testbed.start_apiserver(self.ready_timeout)
        for name in self.nodes:
            self.testbed.wait_node_ready(name, timeout=self.ready_timeout)
        return time.monotonic() - t0

    def _watch_expiry(self) -> float:
        client = self.testbed.client(field_manager="kubeacc-faults")
        listed = client.list(ConfigMap, namespace="default")
        list(listed)  # the list's resourceVersion is known once it was read
        seen = listed.resourceVersion
        self.testbed.stop_apiserver()
        etcd = self.testbed.control_plane.etcd_url
        put = {"key": _b64("/kubeacc-faults/compact-mark"), "value": _b64(str(time.time()))}
        revision = int(_etcd(etcd, "/v3/kv/put", put)["header"]["revision"])
        _etcd(etcd, "/v3/kv/compaction", {"revision": revision, "physical": True})
        took = self.apiserver_back()
        # a watch from what a client saw before: answered 410 Gone, as every client's was
        try:
            for _ in client.watch(ConfigMap, namespace="default", resource_version=seen):
                break
        except ApiError as exc:
            if exc.status.code == 410:
                self.watches_expired += 1
        return took

    def _runtime_restart(self, node: Node) -> float:
        if node.real_runtime:
            took, self.broken = runtime.restart(self.testbed, node.name, self.ready_timeout)
            return took
        kubelet = self.testbed.node(node.name)
        assert kubelet.cri is not None
        kubelet.cri.stop()
        kubelet.cri_socket.unlink(missing_ok=True)
        t0 = time.monotonic()
        kubelet.start_runtime(self.ready_timeout)
        kubelet.wait_healthy(self.ready_timeout)
        self.testbed.wait_node_ready(node.name, timeout=self.ready_timeout)
        return time.monotonic() - t0

    def _reboot(self, node: Node, keeps_bitstreams: bool, power_cut: bool) -> float:
        powerloss.power_off(node, cut=power_cut)
        if node.lifecycle is not None:
            node.lifecycle.kill()  # it keeps no files (tests/faults/lifecycle.py)
        kubelet = self.testbed.node(node.name)
        kubelet.stop_kubelet()
        if node.real_runtime:
            runtime.power_off(kubelet)
        elif kubelet.cri is not None:
            kubelet.cri.stop()
        kubelet.cri_socket.unlink(missing_ok=True)  # the runtime's socket, as in /run
        mig_state.reboot(node.host)
        (node.host / hoststate.STATE).unlink(missing_ok=True)  # compute modes, time slices
        if not keeps_bitstreams:
            for afu in (node.host / "sys" / "devices").rglob("afu_id"):
                afu.write_text(ZERO_ID + "\n")
        shutil.rmtree(node.agent.cdi_dir, ignore_errors=True)
        node.agent.cdi_dir.mkdir(parents=True)
        t0 = time.monotonic()
        before = node.registrations()
        kubelet.launch(self.ready_timeout)
        powerloss.power_on(node)
        node.start_agent()
        self._node_ready(node, before)
        if node.lifecycle is not None:
            node.lifecycle.start()
            node.lifecycle.wait_ready(self.ready_timeout)
        return time.monotonic() - t0

    def _node_ready(self, node: Node, registrations_before: int) -> None:
        kubelet = self.testbed.node(node.name)
        kubelet.wait_healthy(self.ready_timeout)
        self.testbed.wait_node_ready(node.name, timeout=self.ready_timeout)
        node.agent.wait_log(REGISTERED, self.ready_timeout, count=registrations_before + 1)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _etcd(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One call of etcd's JSON client API (its gRPC gateway)."""
    req = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        out: dict[str, Any] = json.loads(resp.read())
    return out
