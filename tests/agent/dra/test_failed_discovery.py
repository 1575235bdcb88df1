"""A discovery pass the machine fails (EMFILE at the host boundary) on an agent publishing to
the real API server: the slices and the Node's labels stay, /readyz says why, the failure is
counted and reported as an Event on the Node; the next good pass ends it."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event

from kubeacc.host import files as hostmod
from kubeacc.testbed import Testbed

from ...testbed.helpers import eventually
from .nodeview import kubeacc_labels, lone_agent, published_devices

pytestmark = pytest.mark.cluster


class _Starved:
    """``os`` whose directory listings fail as a process out of descriptors sees them."""

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    @staticmethod
    def listdir(path: str) -> list[str]:
        raise OSError(errno.EMFILE, "Too many open files", path)


def test_a_failed_pass_withdraws_nothing(
    testbed: Testbed,
    kube_client: Client,
    api_node: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = lone_agent(testbed, api_node, tmp_path, rediscover_interval=0.2)
    agent.start()
    try:
        eventually(agent.published.is_set, 60, "slices published")
        slices = eventually(lambda: published_devices(kube_client, api_node), 30, "slices")
        labels = eventually(lambda: kubeacc_labels(kube_client, api_node), 30, "labels")
        assert agent.not_ready() == []

        monkeypatch.setattr(hostmod, "os", _Starved())
        eventually(lambda: agent.discovery_error, 30, "a failed pass noticed")
        assert "Too many open files" in agent.discovery_error
        (reason,) = agent.not_ready()
        assert reason.startswith("serving the last good inventory: discovery of ")
        failed_before = agent.metrics.discovery_failures._value.get()
        eventually(
            lambda: agent.metrics.discovery_failures._value.get() >= failed_before + 3,
            30,
            "more failed passes",
        )
        assert published_devices(kube_client, api_node) == slices
        assert kubeacc_labels(kube_client, api_node) == labels
        assert len(agent.inventory.devices) == 16
        events = [
            e
            for e in kube_client.list(Event, namespace="default")
            if e.reason == "DiscoveryFailed" and e.involvedObject.name == api_node
        ]
        assert len(events) == 1 and "Too many open files" in (events[0].message or "")

        monkeypatch.undo()
        eventually(lambda: not agent.discovery_error, 30, "discovery works again")
        assert agent.not_ready() == []
        assert published_devices(kube_client, api_node) == slices
    finally:
        agent.stop()
