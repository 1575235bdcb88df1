"""An idle life-cycle agent sends nothing but its ``lastSeen`` refresh, and still puts back at
once what someone else changed of its Accelerators.

The agent used to list its node's Accelerators and every AcceleratorOperation and write every
device's status once a minute: 2 + N requests per node and minute, 0.3 requests/s for a 16-device
node, against issue 30's 0.05 per idle node. The Accelerators now come from a watch, and a status
is written when it changed, when the server's copy of the agent's fields is not what it wrote,
or every ``resync_seconds`` (its ``lastSeen``). Counted client-side: httpx2's request lines sent
from the agent's own thread (its watches run on threads of their own and are counted by their
LISTs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.types import PatchType

from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from kubeacc.testbed import Testbed
from tests.crdfixtures import wait_for
from tests.requestlog import httpx_lines

pytestmark = pytest.mark.cluster

THREAD = "lifecycle-under-test"
GPU = "gpu-0000-01-00-0"  # on the edge-mixed host


class _AgentRequests(logging.Handler):
    """(method, path) of each request the agent's own thread sends."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.sent: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == THREAD and record.getMessage().startswith("HTTP Request"):
            method, url = str(record.args[0]), str(record.args[1])  # type: ignore[index]
            self.sent.append((method, url.split("?", maxsplit=1)[0]))

    def during(self, seconds: float) -> list[tuple[str, str]]:
        start = len(self.sent)
        time.sleep(seconds)
        return self.sent[start:]


@pytest.fixture
def requests() -> Iterator[_AgentRequests]:
    with httpx_lines(_AgentRequests()) as handler:
        yield handler


@contextmanager
def agent_running(
    testbed: Testbed, tmp_path: Path, *, resync_seconds: float
) -> Iterator[LifecycleAgent]:
    node = testbed.node_name
    root = build("edge-mixed", tmp_path / "host")
    (tmp_path / "lib").mkdir()
    agent = LifecycleAgent(
        testbed.client(field_manager=f"kubeacc-agent-{node}"),
        node_name=node,
        host=SyntheticHost(root, kernel=SyntheticKernel(root)),
        bitstream_dir=tmp_path / "lib",
        interval=0.3,
        resync_seconds=resync_seconds,
    )
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), name=THREAD, daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        stop.set()
        thread.join(20)
    assert not thread.is_alive(), "the agent did not stop"


def _published(client: Client, node: str, count: int) -> dict[str, dict[str, Any]] | None:
    """The node's Accelerators once ``count`` of them carry a device."""
    accs = {
        a["metadata"]["name"]: a
        for a in (as_dict(x) for x in client.list(Accelerator, labels={NODE_LABEL: node}))
        if (a.get("status") or {}).get("device")
    }
    return accs if len(accs) == count else None


def _devices(agent: LifecycleAgent) -> int:
    return len(agent._discover())


def test_an_idle_agent_sends_only_its_lastseen_refresh(
    testbed: Testbed,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    kube_client: Client,
    tmp_path: Path,
    requests: _AgentRequests,
) -> None:
    node = testbed.node_name
    with agent_running(testbed, tmp_path, resync_seconds=2.0) as agent:
        devices = _devices(agent)
        wait_for("the Accelerators", lambda: _published(kube_client, node, devices), 60)
        before = _published(kube_client, node, devices) or {}
        sent = requests.during(5.0)  # ~16 passes, two or three refreshes
        after = _published(kube_client, node, devices) or {}
        assert agent.accelerators.lists == 1 and agent.operations.lists == 1

    reads = [r for r in sent if r[0] == "GET"]
    assert not reads, f"an idle agent read from the API server: {reads}"
    assert all(m == "PATCH" and p.endswith("/status") for m, p in sent), sent
    # Each device's status written again (lastSeen), none more than once per resync_seconds.
    assert devices <= len(sent) <= devices * 3, (devices, sent)
    assert all(after[n]["status"]["lastSeen"] != before[n]["status"]["lastSeen"] for n in before)


def test_what_someone_else_changes_or_deletes_is_put_back_at_once(
    testbed: Testbed,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    kube_client: Client,
    tmp_path: Path,
    requests: _AgentRequests,
) -> None:
    node = testbed.node_name
    name = f"{node}-{GPU}"
    with agent_running(testbed, tmp_path, resync_seconds=300.0) as agent:
        devices = _devices(agent)
        wait_for("the Accelerators", lambda: _published(kube_client, node, devices), 60)
        time.sleep(1.0)  # settled: the first writes' answers are back
        original = as_dict(kube_client.get(Accelerator, name))["status"]

        # A change to what the agent does not own (an annotation) costs it nothing.
        kube_client.patch(
            Accelerator,
            name,
            {"metadata": {"annotations": {"example.com/note": "inspected"}}},
            patch_type=PatchType.MERGE,
        )
        assert requests.during(2.0) == []

        # The agent's own fields edited by someone else: put back well before any resync.
        kube_client.patch(
            Accelerator.Status,
            name,
            {"status": {"hostDriver": "tampered", "device": {"name": "not-this-one"}}},
            patch_type=PatchType.MERGE,
        )

        def restored() -> bool:
            status = as_dict(kube_client.get(Accelerator, name))["status"]
            return (
                status.get("hostDriver") == original.get("hostDriver")
                and status["device"] == original["device"]
            )

        wait_for("the edited status put back", restored, 15)

        # Deleted: created again, with its status.
        kube_client.delete(Accelerator, name)
        wait_for(
            "the deleted Accelerator back",
            lambda: _published(kube_client, node, devices),
            15,
        )
        assert agent.accelerators.lists == 1  # all of it through the one watch
