"""helm built from tools/helm (like the testbed's binaries), and a cluster of the chart tests.

``Helm`` and ``CHART`` are kubeacc.testbed.withkubeacc's (what ``testbed up --with-kubeacc``
uses): a failed helm command raises ``InstallError`` with its output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeacc.testbed.helm import ensure_helm
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.withkubeacc import CHART, Helm, import_images

__all__ = ["CHART", "Helm"]


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(ensure_helm())


@pytest.fixture(scope="module")
def real_cluster(
    helm: Helm, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Testbed, Helm]]:
    """A cluster of its own whose one node (named by the test module's ``NODE``) runs
    containerd, the images of kubeacc.testbed.withkubeacc imported there; the module's tests
    install the chart (``withkubeacc.install(..., images=False)``)."""
    node = request.module.NODE
    with Testbed.start(kubelet=KubeletOptions(node_name=node, runtime="containerd")) as tb:
        import_images(tb.kubelet, tmp_path_factory.mktemp("images"))
        yield tb, Helm(helm.binary, tb.kubeconfig)


@pytest.fixture(scope="module")
def chart_cluster(helm: Helm) -> Iterator[tuple[Testbed, Helm]]:
    """A cluster of its own: installing the chart owns CRDs and cluster roles that the session
    testbed's other tests install themselves, and 'nothing left behind' must be checkable."""
    with Testbed.start() as tb:
        yield tb, Helm(helm.binary, tb.kubeconfig)
