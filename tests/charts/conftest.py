"""helm built from tools/helm (like the testbed's binaries), and a cluster of the chart tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.testbed.helm import ensure_helm
from kubeacc.testbed.testbed import Testbed

CHART = Path(__file__).parents[2] / "charts" / "kubeacc"


class Helm:
    def __init__(self, binary: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), *args]
        if self.kubeconfig is not None:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(ensure_helm())


@pytest.fixture(scope="module")
def chart_cluster(helm: Helm) -> Iterator[tuple[Testbed, Helm]]:
    """A cluster of its own: installing the chart owns CRDs and cluster roles that the session
    testbed's other tests install themselves, and 'nothing left behind' must be checkable."""
    with Testbed.start() as tb:
        yield tb, Helm(helm.binary, tb.kubeconfig)
