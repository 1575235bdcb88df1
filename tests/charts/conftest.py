"""helm built from tools/helm (like the testbed's binaries), and the clusters of the chart tests.

``Helm`` and ``CHART`` are kubeacc.testbed.withkubeacc's (what ``testbed up --with-kubeacc``
uses): a failed helm command raises ``InstallError`` with its output."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.testbed.helm import ensure_helm
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.withkubeacc import CHART, Helm, import_images
from tests.charts.realreset import ResetError, Snapshot, reset

__all__ = ["CHART", "REAL_NODE", "Helm"]

#: The one node of the real-runtime chart clusters (containerd + runc).
REAL_NODE = "node-c"


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(ensure_helm())


@contextlib.contextmanager
def _real_runtime(helm: Helm, scratch: Path) -> Iterator[tuple[Testbed, Helm]]:
    """A one-node cluster on containerd with the images of kubeacc.testbed.withkubeacc imported
    there (the tests install the chart with ``withkubeacc.install(..., images=False)``)."""
    with Testbed.start(kubelet=KubeletOptions(node_name=REAL_NODE, runtime="containerd")) as tb:
        import_images(tb.kubelet, scratch)
        yield tb, Helm(helm.binary, tb.kubeconfig)


class _SharedRealRuntime:
    """The package's real-runtime cluster, started at first use. A test whose clean-up failed
    leaves it :meth:`discard`-ed: the next test gets a fresh cluster, never a dirty one."""

    def __init__(self, helm: Helm, tmp: pytest.TempPathFactory) -> None:
        self._helm = helm
        self._tmp = tmp
        self._stack: contextlib.ExitStack | None = None
        self._cluster: tuple[Testbed, Helm] | None = None

    def get(self) -> tuple[Testbed, Helm]:
        if self._cluster is None:
            stack = contextlib.ExitStack()
            self._cluster = stack.enter_context(_real_runtime(self._helm, self._tmp.mktemp("img")))
            self._stack = stack
        return self._cluster

    def discard(self) -> None:
        """Stop the cluster after a failed clean-up, its work directory kept for the report."""
        if self._cluster is not None:
            self._cluster[0].keep = True
        self.close()

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack = self._cluster = None


@pytest.fixture(scope="package")
def _shared_real_runtime(
    helm: Helm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_SharedRealRuntime]:
    shared = _SharedRealRuntime(helm, tmp_path_factory)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def real_cluster(_shared_real_runtime: _SharedRealRuntime) -> Iterator[tuple[Testbed, Helm]]:
    """The real-runtime cluster the chart tests of this package share (starting it and importing
    the images is the slow part). Each test gets it as a fresh cluster would be: afterwards the
    namespaces it made are deleted (their pods first, so the agent unprepares their claims), the
    release is uninstalled, and the cluster-wide objects and node labels it added are removed."""
    tb, helm = _shared_real_runtime.get()
    before = Snapshot.take(tb)
    yield tb, helm
    try:
        reset(tb, helm, before)
    except ResetError as exc:
        _shared_real_runtime.discard()
        pytest.fail(f"the shared real-runtime cluster could not be reset: {exc}", pytrace=False)


@pytest.fixture
def own_real_cluster(helm: Helm, tmp_path: Path) -> Iterator[tuple[Testbed, Helm]]:
    """A real-runtime cluster for one test only: for a test that leaves the node in a state no
    clean-up undoes (the kubelet retrying a claim's unprepare against a driver that is gone)."""
    with _real_runtime(helm, tmp_path / "img") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def chart_cluster(helm: Helm) -> Iterator[tuple[Testbed, Helm]]:
    """A cluster of its own: installing the chart owns CRDs and cluster roles that the session
    testbed's other tests install themselves, and 'nothing left behind' must be checkable."""
    with Testbed.start() as tb:
        yield tb, Helm(helm.binary, tb.kubeconfig)
