"""The probe-port attack (issue 23) against a real agent with few file descriptors.

Hundreds of connections that never finish their request head (re-opened as the agent closes
them), held on the agent's metrics/probe port for longer than its keep-alive deadline, while
the kubelet's probe keeps asking /healthz and a pod's claim is prepared. The agent runs under a
low RLIMIT_NOFILE, so an unbounded port would run it out of descriptors (its discovery reads
would then fail). What must hold: every /healthz answered 200, the slices and the Node's
kubeacc.io/ labels unchanged, no failed discovery pass, the claim prepared and the pod Running.
"""

from __future__ import annotations

import json
import os
import sys
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
from kubeacc.testbed.slowclients import SlowClients

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
    with SlowClients(port, ATTACKERS, opening=b"GET /metrics HTTP/1.1\r\nX-Slow: ") as attack:
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
