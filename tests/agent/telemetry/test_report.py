"""Device faults written to the Accelerator (kubeacc.agent.telemetry.report), on the testbed's
API server: the fault lands in ``status.lastFault`` under the agent's own field manager, a
device without an Accelerator is no error, and a write the API server does not take (here: an
address where nothing listens) is kept and written at the next pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from kubeacc.agent.telemetry.faults import DeviceFault
from kubeacc.agent.telemetry.report import FaultReporter
from kubeacc.crds.api import EventClass
from kubeacc.crds.resources import Accelerator, as_dict
from kubeacc.model import DeviceType
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_accelerator
from tests.hosts import discover

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

NODE = "fault-node"


def _status(client: Client, name: str) -> dict[str, Any]:
    return dict(as_dict(client.get(Accelerator, name)).get("status") or {})


def test_faults_land_on_the_accelerator_and_survive_an_absent_api_server(
    testbed: Testbed, tmp_path: Path
) -> None:
    admin = testbed.client(field_manager="test")
    gpus = discover(build("dgx-h100", tmp_path / "host")).by_type(DeviceType.GPU)[:2]
    names = [
        put_accelerator(admin, NODE, g, [{"kind": "Pod", "namespace": "a", "name": "p"}])
        for g in gpus
    ]
    reporter = FaultReporter(admin, NODE)

    reporter.report(
        [
            DeviceFault(gpus[0].name, EventClass.XID, 79),
            DeviceFault(gpus[0].name, EventClass.ECC_UNCORRECTABLE, detail="1"),  # same pass
            DeviceFault("gpu-0000-ff-00-0", EventClass.FALLEN_OFF_BUS),  # no Accelerator
        ]
    )
    status = _status(admin, names[0])
    fault = status["lastFault"]
    assert (fault["event"], fault["xid"]) == ("Xid", 79)  # the first of the device's faults
    assert status["allocatedTo"] == [{"kind": "Pod", "namespace": "a", "name": "p"}]
    assert "lastFault" not in _status(admin, names[1])
    managers = {
        m.manager
        for m in admin.get(Accelerator, names[0]).metadata.managedFields or []  # type: ignore[union-attr]
    }
    assert f"kubeacc-faults-{NODE}" in managers
    # The second fault of that pass is not lost: written at the next pass, with its own time
    # (the controller acts once per new time).
    reporter.report([])
    second = _status(admin, names[0])["lastFault"]
    assert (second["event"], second["detail"]) == ("EccUncorrectable", "1")
    assert second["time"] > fault["time"]

    # The API server unreachable: the write fails, the fault is kept ...
    away = KubeConfig.from_one(
        cluster=Cluster(server=f"https://127.0.0.1:{free_port()}"), user=User()
    )
    reporter.client = Client(away)
    with pytest.raises(httpx.ConnectError):
        reporter.report([DeviceFault(gpus[1].name, EventClass.LINK_DOWN, detail="ib0")])
    assert "lastFault" not in _status(admin, names[1])
    # ... and written at the next pass, with nothing new.
    reporter.client = admin
    reporter.report([])
    fault = _status(admin, names[1])["lastFault"]
    assert (fault["event"], fault["detail"]) == ("LinkDown", "ib0")
    before = reporter.written
    reporter.report([])
    assert reporter.written == before  # nothing pending any more
