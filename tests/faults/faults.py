"""The faults the runner injects, each a real one on the testbed, and the wait until every
component is ready again.

- ``agent-kill``: SIGKILL of one node's ``kubeacc agent`` process, started again at once.
- ``kubelet-restart``: one node's kubelet stopped and started (its CRI runtime and pods stay).
- ``apiserver-outage``: kube-apiserver stopped for ``seconds``, then started on the same etcd.
- ``node-reboot``: one node loses power as a reboot does: agent killed, kubelet and its CRI
  runtime stopped (containers gone), the synthetic host's hardware state back to boot
  (``mig_state.reboot``: MIG instances gone), the node's CDI directory emptied as ``/var/run``
  is; the state directory (``/var/lib/kubeacc``) and the kubelet's root are kept. Then runtime,
  kubelet and agent start again.

Each :meth:`Injector.inject` returns the seconds from the end of the fault (the process started
again, the API server restarted) until every component of the node, or of the cluster for an
outage, is ready: the node Ready and the agent registered with its kubelet again.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kubeacc.synthetic import mig_state
from kubeacc.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess

AGENT_KILL = "agent-kill"
KUBELET_RESTART = "kubelet-restart"
APISERVER_OUTAGE = "apiserver-outage"
NODE_REBOOT = "node-reboot"
KINDS = (AGENT_KILL, KUBELET_RESTART, APISERVER_OUTAGE, NODE_REBOOT)

REGISTERED = "kubelet registered plugin kubeacc.io"


@dataclass(frozen=True)
class Fault:
    kind: str
    #: the node it hits ("" for the API server)
    node: str = ""
    #: how long the API server stays down
    seconds: float = 0.0

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"{self.kind}{where}" + (f" for {self.seconds:.0f}s" if self.seconds else "")


@dataclass
class Node:
    """One node of the run: its agent process and synthetic host."""

    name: str
    host: Path
    agent: AgentProcess

    def registrations(self) -> int:
        return self.agent.log().count(REGISTERED)


class Injector:
    def __init__(self, testbed: Testbed, nodes: dict[str, Node], ready_timeout: float) -> None:
        self.testbed = testbed
        self.nodes = nodes
        self.ready_timeout = ready_timeout

    def inject(self, fault: Fault) -> float:
        """Inject ``fault``; return the seconds to recover (AssertionError past the timeout)."""
        if fault.kind == AGENT_KILL:
            return self._agent_kill(self.nodes[fault.node])
        if fault.kind == KUBELET_RESTART:
            return self._kubelet_restart(self.nodes[fault.node])
        if fault.kind == APISERVER_OUTAGE:
            return self._apiserver_outage(fault.seconds)
        if fault.kind == NODE_REBOOT:
            return self._reboot(self.nodes[fault.node])
        raise ValueError(f"unknown fault {fault.kind!r}")

    def _agent_kill(self, node: Node) -> float:
        node.agent.kill()
        t0 = time.monotonic()
        node.agent.start()
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
        t0 = time.monotonic()
        self.testbed.start_apiserver(self.ready_timeout)
        for name in self.nodes:
            self.testbed.wait_node_ready(name, timeout=self.ready_timeout)
        return time.monotonic() - t0

    def _reboot(self, node: Node) -> float:
        node.agent.kill()
        kubelet = self.testbed.node(node.name)
        kubelet.stop_kubelet()
        if kubelet.cri is not None:
            kubelet.cri.stop()
        kubelet.cri_socket.unlink(missing_ok=True)  # the runtime's socket, as in /run
        mig_state.reboot(node.host)
        shutil.rmtree(node.agent.cdi_dir, ignore_errors=True)
        node.agent.cdi_dir.mkdir(parents=True)
        t0 = time.monotonic()
        before = node.registrations()
        kubelet.launch(self.ready_timeout)
        node.agent.start()
        self._node_ready(node, before)
        return time.monotonic() - t0

    def _node_ready(self, node: Node, registrations_before: int) -> None:
        kubelet = self.testbed.node(node.name)
        kubelet.wait_healthy(self.ready_timeout)
        self.testbed.wait_node_ready(node.name, timeout=self.ready_timeout)
        node.agent.wait_log(REGISTERED, self.ready_timeout, count=registrations_before + 1)
