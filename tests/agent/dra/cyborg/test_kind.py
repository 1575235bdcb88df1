"""Claims on Cyborg's devices through the DRA driver (kubeacc.agent.dra.cyborg.kind), against
the real Cyborg and Placement of the tests' cloud."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from kubeacc.agent.dra.cyborg.backend import CyborgBackend
from kubeacc.agent.dra.cyborg.kind import ENV_ARQ, ENV_PCI
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.testbed.cyborgcloud import FAKE_SLOTS, CyborgCloud
from tests.agent.dra.memclaims import Claims
from tests.conftest import CYBORG_NODE

from .conftest import cyborg_driver, leftover


def _claims(devices: list[str], uid: str) -> Claims:
    claims = Claims()
    claims.add("c", uid, devices, pool=CYBORG_NODE)
    return claims


def test_inventory_publishes_one_device_per_slot(backend: CyborgBackend) -> None:
    inv = backend.discover()
    assert len(inv.devices) == FAKE_SLOTS
    dev = inv.devices[0]
    assert dev.type.value == "fpga" and dev.source == "cyborg"
    assert dev.attributes["resourceClass"] == "FPGA"
    assert "CUSTOM_FAKE_DEVICE" in dev.attributes["traits"]
    assert [d.index for d in inv.devices] == list(range(FAKE_SLOTS))


def test_prepare_binds_arqs_allocates_and_unprepare_frees_both(
    cyborg_cloud: CyborgCloud, backend: CyborgBackend, tmp_path: Path
) -> None:
    uid = str(uuid.uuid4())
    names = [d.name for d in backend.discover().devices[:2]]
    driver = cyborg_driver(tmp_path, _claims(names, uid), backend)
    driver.reconcile()
    ref = ClaimRef("ns", "c", uid)
    out = driver.prepare([ref])
    assert out[uid].error == ""
    arqs = cyborg_cloud.cyborg("GET", f"/v2/accelerator_requests?instance={uid}")["arqs"]
    assert len(arqs) == 2
    assert {a["state"] for a in arqs} == {"Bound"}
    assert {a["hostname"] for a in arqs} == {CYBORG_NODE}
    assert {a["instance_uuid"] for a in arqs} == {uid}
    assert backend.events.received == 2  # Cyborg told its consumer, kube-acc, of both binds
    allocation = cyborg_cloud.placement("GET", f"/allocations/{uid}")["allocations"]
    assert [r["resources"] for r in allocation.values()] == [{"FPGA": 2}]
    spec = json.loads(next((tmp_path / "cdi").glob(f"*{uid}*")).read_text())
    envs = [e for d in spec["devices"] for e in d["containerEdits"]["env"]]
    assert {e.split("=", 1)[1] for e in envs if e.startswith(ENV_ARQ + "=")} == {
        a["uuid"] for a in arqs
    }
    pcis = {e.split("=", 1)[1] for e in envs if e.startswith(ENV_PCI + "=")}
    assert len(pcis) == 2 and all(p.startswith("0000:0c:") for p in pcis)

    assert driver.unprepare([ref]) == {uid: ""}
    assert leftover(cyborg_cloud) == {"arqs": [], "allocations": {}}
