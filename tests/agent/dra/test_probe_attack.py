"""The probe-port attack (issue 23) against a real agent with few file descriptors.

Hundreds of connections that never finish their request head (re-opened as the agent closes
them), held on the agent's metrics/probe port for longer than its keep-alive deadline, while
the kubelet's probe keeps asking /healthz and a pod's claim is prepared. The agent runs under a
low RLIMIT_NOFILE, so an unbounded port would run it out of descriptors (its discovery reads
would then fail). What must hold: every /healthz answered 200, the slices and the Node's
kubeacc.io/ labels unchanged, no failed discovery pass, the claim prepared and the pod Running.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import free_port

from ...nodestack import claim_pod as pod_obj
from ...testbed.helpers import eventually
from .agentproc import AgentProcess
from .nodeview import kubeacc_labels, published_devices
from .test_e2e import claim_obj, one_gpu, running

pytestmark = pytest.mark.cluster

#: The agent's descriptor limit: what it uses at rest (14 measured) and under the attack (30:
#: the probe port's 16 connections) with room to spare; far below the attack's 400.
NOFILE = 64
ATTACKERS = 400
ATTACK_SECONDS = 25.0

_LIMITED = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE})); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.fixture
def limited_agent(testbed: Testbed, tmp_path: Path) -> Iterator[tuple[AgentProcess, int]]:
    port = free_port()
    agent = AgentProcess(
        testbed.node_name,
        profiles.build("dgx-h100", tmp_path / "host"),
        testbed.kubeconfig,
        testbed.kubelet.root_dir,
        tmp_path,
    )
    agent.start(
        extra=[f"--metrics-address=127.0.0.1:{port}"],
        wrapper=[sys.executable, "-c", _LIMITED],
    )
    try:
        agent.wait_registered()
        yield agent, port
    finally:
        agent.stop()


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return int(r.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


class Attack:
    """Keeps ``count`` connections open on ``port``, each with half a request head."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.count = count
        self.stop = threading.Event()
        self.opened = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Attack:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        held: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                alive = []
                for s in held:  # drop those the agent closed
                    try:
                        s.setblocking(False)
                        if s.recv(1) == b"":
                            s.close()
                            continue
                    except BlockingIOError:
                        pass
                    except OSError:
                        s.close()
                        continue
                    alive.append(s)
                held = alive
                while len(held) < self.count and not self.stop.is_set():
                    try:
                        s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
                    except OSError:
                        break
                    held.append(s)
                    self.opened += 1
                self.stop.wait(0.5)
        finally:
            for s in held:
                with contextlib.suppress(OSError):
                    s.close()


def test_idle_connections_on_the_probe_port_take_nothing_down(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    limited_agent: tuple[AgentProcess, int],
) -> None:
    agent, port = limited_agent
    node = testbed.node_name
    eventually(lambda: _get(port, "/readyz") == 200, 60, "agent ready")
    slices = eventually(lambda: published_devices(kube_client, node), 60, "slices")
    labels = eventually(lambda: kubeacc_labels(kube_client, node), 60, "kubeacc.io/ labels")
    assert agent.proc is not None
    pid = agent.proc.pid
    at_rest = len(os.listdir(f"/proc/{pid}/fd"))

    probes: list[int] = []
    most_fds = at_rest
    with Attack(port, ATTACKERS) as attack:
        kube_client.create(claim_obj("gpu", namespace, one_gpu()))
        kube_client.create(pod_obj("app", namespace, "gpu"))
        end = time.monotonic() + ATTACK_SECONDS
        while time.monotonic() < end:
            probes.append(_get(port, "/healthz"))
            most_fds = max(most_fds, len(os.listdir(f"/proc/{pid}/fd")))
            time.sleep(1.0)
        assert running(kube_client, "app", namespace) or eventually(
            lambda: running(kube_client, "app", namespace), 60, "pod Running (prepared)"
        )
        during = (
            published_devices(kube_client, node),
            kubeacc_labels(kube_client, node),
            _get(port, "/readyz"),
        )
        opened = attack.opened

    report = {
        "nofile": NOFILE,
        "fds_at_rest": at_rest,
        "fds_most_under_attack": most_fds,
        "connections_opened": opened,
        "healthz": {str(c): probes.count(c) for c in set(probes)},
    }
    print(json.dumps(report))
    assert opened > ATTACKERS, report  # the agent kept closing them and they kept coming
    assert set(probes) == {200}, report
    assert during == (slices, labels, 200)
    assert most_fds < NOFILE - 10, report
    log = agent.log()
    assert "discovery of" not in log and "Too many open files" not in log, log[-3000:]
    assert (
        published_devices(kube_client, node) == slices
        and kubeacc_labels(kube_client, node) == labels
    )
    kube_client.delete(Pod, "app", namespace=namespace)
