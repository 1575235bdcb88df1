from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.controller.controller import Controller
from kubeacc.model import Device, DeviceType
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import (
    kubeacc_cleanup,
    kubeacc_crds,
    make_controller,
    running,
    wait_until_no_claim_holds,
)
from tests.hosts import discover

__all__ = ["kubeacc_cleanup", "kubeacc_crds"]


@pytest.fixture
def controller(testbed: Testbed, kubeacc_crds: None, kubeacc_cleanup: None) -> Iterator[Controller]:
    """A controller running in a thread (its own Lease, so tests do not share a leader)."""
    wait_until_no_claim_holds(testbed.client(), testbed.node_name)
    ctl = make_controller(testbed)
    with running(ctl):
        yield ctl


@pytest.fixture(scope="module")
def fpgas(tmp_path_factory: pytest.TempPathFactory) -> list[Device]:
    root = build("intel-fpga-dfl", tmp_path_factory.mktemp("host") / "root")
    return discover(Path(root)).by_type(DeviceType.FPGA)
