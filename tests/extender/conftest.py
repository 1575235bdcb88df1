from __future__ import annotations

import pytest

from kubeacc.model import Device
from tests.extender.helpers import host_gpus


@pytest.fixture(scope="session")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Device, ...]:
    """The 8 H100s of the dgx-h100 synthetic host (NUMA 0: 4, NUMA 1: 4)."""
    return host_gpus("dgx-h100", tmp_path_factory.mktemp("hosts"))
