"""An idle node agent sends the API server nothing, and still puts back at once what someone
else changed of its slices and labels.

The agent re-checks the server's copy of its node's ResourceSlices and labels every
``resync_interval`` (a minute by default). That re-check was a LIST of the node's slices, a GET
and a PATCH of the Node, per node and minute: 0.05 requests/s per idle node, 250/s at 5,000
nodes (bench/agent_api_load.py). It now reads two watches (the node's slices, its Node), which
also wake the agent when those objects change, so a repair no longer waits for the re-check.
Counted client-side: httpx2's request lines sent from the agent's loop thread. The agent runs
as its node's identity (deploy/rbac/agent.yaml), which must allow those watches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from kubeacc.agent.dra.slices import slice_fields
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import agent_kubeconfig, install_agent_access

from ...requestlog import httpx_lines
from ...testbed.helpers import eventually
from .nodeview import kubeacc_labels, lone_agent, published_devices

pytestmark = pytest.mark.cluster

LABEL = "kubeacc.io/gpu.count"


class _LoopRequests(logging.Handler):
    """The requests the agent's loop thread sends (httpx2 logs one line per request)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.threadName == "agent-loop" and message.startswith("HTTP Request"):
            self.lines.append(message)


@pytest.fixture
def loop_requests() -> Iterator[_LoopRequests]:
    with httpx_lines(_LoopRequests()) as handler:
        yield handler


def test_an_idle_agent_sends_nothing_and_repairs_at_once(
    testbed: Testbed,
    kube_client: Client,
    api_node: str,
    tmp_path: Path,
    loop_requests: _LoopRequests,
) -> None:
    install_agent_access(kube_client)
    agent = lone_agent(
        testbed,
        api_node,
        tmp_path,
        kubeconfig=agent_kubeconfig(testbed, api_node, tmp_path),  # the agent's own RBAC
        rediscover_interval=0.5,
        resync_interval=1.0,  # a re-check of the server's copy every second
    )
    agent.start()
    try:
        eventually(agent.published.is_set, 60, "slices published")
        devices = eventually(lambda: published_devices(kube_client, api_node), 30, "slices")
        labels = eventually(lambda: kubeacc_labels(kube_client, api_node), 30, "labels")
        assert agent.node_cache is not None
        eventually(agent.own_slices.synced.is_set, 30, "slice watch synced")
        eventually(agent.node_cache.synced.is_set, 30, "node watch synced")
        time.sleep(2)  # the writes of the start are seen by the watches

        loop_requests.lines.clear()
        time.sleep(6)  # ~5 re-checks and 10 discovery passes
        assert loop_requests.lines == [], "requests of an idle agent"

        # Someone deletes a slice and a label: put back without waiting for a re-check.
        agent.publish = msgspec.structs.replace(agent.publish, resync_interval=3600.0)
        time.sleep(1.5)  # the last 1-second re-check is done
        (first, *_) = kube_client.list(ResourceSlice, fields=slice_fields(api_node))
        assert first.metadata is not None and first.metadata.name
        kube_client.delete(ResourceSlice, first.metadata.name)
        eventually(
            lambda: published_devices(kube_client, api_node) == devices, 20, "slice put back"
        )
        kube_client.patch(
            Node,
            api_node,
            {"metadata": {"labels": {LABEL: None}}},
            patch_type=PatchType.MERGE,
        )
        eventually(lambda: kubeacc_labels(kube_client, api_node) == labels, 20, "label put back")
        assert loop_requests.lines, "the repairs were written by the loop"
    finally:
        agent.stop()
