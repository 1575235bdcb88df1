from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from kubeacc.controller.controller import Controller
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import kubeacc_cleanup, kubeacc_crds, running

__all__ = ["kubeacc_cleanup", "kubeacc_crds"]


@pytest.fixture
def controller(testbed: Testbed, kubeacc_crds: None, kubeacc_cleanup: None) -> Iterator[Controller]:
    """A controller running in a thread (its own Lease, so tests do not share a leader)."""
    ctl = Controller(
        testbed.client(field_manager="kubeacc-controller"),
        identity=f"test-{uuid.uuid4().hex[:6]}",
        lease_namespace="default",
        lease_name=f"kubeacc-test-{uuid.uuid4().hex[:6]}",
        interval=0.3,
    )
    with running(ctl):
        yield ctl
