"""``kubeacc status`` against a controller whose wall clock is two minutes behind the API
server's (libfaketime, tests/faults/clock.py), on the real testbed: it leads, and the check says
so (judged on the API server's clock) and names the skew."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lightkube.resources.coordination_v1 import Lease

from kubeacc.status import cluster
from kubeacc.testbed.testbed import Testbed
from tests.faults import clock
from tests.faults.controllers import ControllerProcess

pytestmark = pytest.mark.cluster


def test_a_leader_whose_clock_is_behind_reads_as_leading(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    clocks = clock.Clocks(tmp_path / "clocks", ["controller"])
    clocks["controller"].step(-120)
    ctl = ControllerProcess("behind", testbed.kubeconfig, tmp_path, lease_namespace=namespace)
    ctl.start(clocks["controller"].wrapper())
    client = testbed.client()
    try:
        deadline = time.monotonic() + 90
        while "acquired new lease" not in ctl.log():
            assert ctl.proc is not None and ctl.proc.poll() is None, ctl.log()[-2000:]
            assert time.monotonic() < deadline, ctl.log()[-2000:]
            time.sleep(0.2)
        # the step is real: the holder stamps renewTime two minutes before the API server's
        # record of the renewal
        lease = client.get(Lease, cluster.CONTROLLER_LEASE, namespace=namespace)
        assert lease.spec is not None and lease.spec.renewTime is not None
        seen = cluster.recorded_at(lease)
        assert seen is not None
        assert -180 < (lease.spec.renewTime - seen).total_seconds() < -60, lease
        # across several renewals (every 2 s), the check passes and names the skew
        for _ in range(3):
            check = cluster.controller(client, namespace)
            assert check.result == "pass", check
            assert "leader behind" in check.detail and "off the API server's" in check.detail
            time.sleep(2)
    finally:
        ctl.stop()
