"""helm built from tools/helm (like the testbed's binaries), and a cluster of the chart tests.

``Helm`` and ``CHART`` are kubeacc.testbed.withkubeacc's (what ``testbed up --with-kubeacc``
uses): a failed helm command raises ``InstallError`` with its output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeacc.testbed.helm import ensure_helm
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.withkubeacc import CHART, Helm

__all__ = ["CHART", "Helm"]


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(ensure_helm())


@pytest.fixture(scope="module")
def chart_cluster(helm: Helm) -> Iterator[tuple[Testbed, Helm]]:
    """A cluster of its own: installing the chart owns CRDs and cluster roles that the session
    testbed's other tests install themselves, and 'nothing left behind' must be checkable."""
    with Testbed.start() as tb:
        yield tb, Helm(helm.binary, tb.kubeconfig)
