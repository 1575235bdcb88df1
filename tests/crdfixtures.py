"""Shared fixtures for tests of the kubeacc.io custom resources (imported by conftest files)."""

from __future__ import annotations

import pytest

from kubeacc.crds.resources import install_crds
from kubeacc.testbed.testbed import Testbed


@pytest.fixture(scope="session")
def kubeacc_crds(testbed: Testbed) -> None:
    """The kubeacc.io CRDs, installed once per session.

    Session scope matters: the testbed's per-test cleanup deletes CRDs a *test* created, and a
    session fixture runs before that snapshot is taken.
    """
    install_crds(testbed.client(field_manager="kubeacc-test-crds"))
