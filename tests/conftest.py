"""Shared pytest configuration: the real-cluster testbed fixtures (see docs/testing.md) and the
synthetic hosts every test directory uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.cli.demo_stack import KubeaccStack
from kubeacc.testbed import Testbed
from kubeacc.testbed.cyborgcloud import CyborgCloud
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.shapes import MULTINODE_SHAPES
from tests.hosts import HostFactory

pytest_plugins = ["kubeacc.testbed.pytest_plugin"]


@pytest.fixture(scope="session")
def _host_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hosts")


@pytest.fixture
def hosts(_host_cache: Path, tmp_path: Path) -> HostFactory:
    """Synthetic host trees: ``pristine(profile)`` is shared, ``copy(profile)`` may be damaged."""
    return HostFactory(_host_cache, tmp_path)


@pytest.fixture(scope="module")
def kubeacc_multinode(
    multinode_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeaccStack]:
    """kube-acc on the multi-node testbed: CRDs, DeviceClasses, controller, and on every node the
    node agent and the life-cycle agent on the node's synthetic host (as ``kubeacc demo``).
    Module scope: other modules (the journeys) run their own agents on these nodes."""
    stack = KubeaccStack(
        multinode_testbed,
        tmp_path_factory.mktemp("multinode"),
        {s.name: s.profile for s in MULTINODE_SHAPES},
        interval=0.5,
    )
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


#: The compute host of the Cyborg cloud: the testbed's node (kubeacc.testbed.kubelet's default
#: name), so that kube-acc's agent on that node runs on Cyborg's devices.
CYBORG_NODE = "node-a"
#: The Cyborg cloud's compute host with a (synthetic) Intel PAC card that Cyborg's own Intel FPGA
#: driver discovers and programs (kubeacc.testbed.cyborgfpga).
CYBORG_FPGA_NODE = "fpga-pac"


@pytest.fixture(scope="session")
def cyborg_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CyborgCloud]:
    """RabbitMQ, Placement, Glance and Cyborg (API, conductor, one agent with the fake driver for
    the compute host :data:`CYBORG_NODE`, one with the Intel FPGA driver on a synthetic PAC card
    for :data:`CYBORG_FPGA_NODE`), installed from their packages (kubeacc.testbed.cyborgcloud),
    for the whole session. One fake-driver host only: the fake driver reports the same PCI
    addresses on every host, and Cyborg's conductor then keeps one host's device. Cyborg's
    ``[nova]`` endpoint is ``cyborg_cloud.nova_url``, on a port the tests' kube-acc agent serves
    the bind events on."""
    work = tmp_path_factory.mktemp("cyborg")
    port = free_port()
    cloud = CyborgCloud(
        work,
        work / "logs",
        (CYBORG_NODE, CYBORG_FPGA_NODE),
        f"http://127.0.0.1:{port}",
        glance=True,
        fpga_hosts=(CYBORG_FPGA_NODE,),
    )
    cloud.start()
    try:
        yield cloud
    finally:
        cloud.stop()
