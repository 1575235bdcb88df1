"""Fixtures for the DRA driver tests: synthetic inventories, fresh Node objects."""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from kubeacc.agent.dra.driver import Driver
from kubeacc.model import Inventory
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from tests.hosts import discover

from .agentproc import AgentProcess
from .faultyos import FaultyOS, install
from .memclaims import Claims, memory_driver

_CACHE: dict[str, Inventory] = {}


def inventory(profile: str, tmp: Path) -> Inventory:
    """The discovered inventory of a synthetic profile (built once per session)."""
    if profile not in _CACHE:
        root = profiles.build(profile, tmp / profile)
        _CACHE[profile] = discover(root)
    return copy.deepcopy(_CACHE[profile])


@pytest.fixture
def claims() -> Claims:
    """An empty claim source in memory."""
    return Claims()


@pytest.fixture
def driver(tmp_path: Path, claims: Claims, dgx: Inventory) -> Driver:
    """A driver on ``claims`` and the DGX H100's devices, its files in tmp_path."""
    return memory_driver(tmp_path, claims, dgx)


@pytest.fixture
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    return inventory("dgx-h100", tmp_path_factory.getbasetemp())


@pytest.fixture
def make_inventory(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    def make(profile: str) -> Inventory:
        return inventory(profile, tmp_path_factory.getbasetemp())

    return make


@pytest.fixture
def api_node(kube_client: Client) -> Iterator[str]:
    """A Node object without a kubelet (slices of such nodes are still valid)."""
    name = f"pub-{uuid.uuid4().hex[:6]}"
    kube_client.create(Node(metadata=ObjectMeta(name=name)))
    yield name
    with contextlib.suppress(ApiError):
        kube_client.delete(Node, name)


@pytest.fixture
def lone_agent(
    testbed: Testbed, kube_client: Client, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[AgentProcess]:
    """An agent for a Node without kubelet: only this test calls its socket. Parametrized
    indirectly, the AgentProcess class to run it with (lazystate.PowerCutAgent)."""
    node = f"lone-{uuid.uuid4().hex[:6]}"
    kube_client.create(Node(metadata=ObjectMeta(name=node)))
    host = profiles.build("dgx-h100", tmp_path / "host")
    cls: type[AgentProcess] = getattr(request, "param", AgentProcess)
    agent = cls(node, host, testbed.kubeconfig, tmp_path / "kubelet", tmp_path)
    try:
        yield agent
    finally:
        agent.stop()
        kube_client.delete(Node, node)


@pytest.fixture
def fos(monkeypatch: pytest.MonkeyPatch) -> FaultyOS:
    """Faults at the OS boundary of the DRA state writers (see faultyos.py)."""
    return install(monkeypatch)
