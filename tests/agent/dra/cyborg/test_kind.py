"""Claims on Cyborg's devices through the DRA driver (kubeacc.agent.dra.cyborg.kind), against
the real Cyborg and Placement of the tests' cloud."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import msgspec
import pytest

from kubeacc.agent.dra.cyborg.backend import CyborgBackend
from kubeacc.agent.dra.cyborg.kind import ENV_ARQ, ENV_PCI
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.node.cyborg.client import CyborgError, CyborgUnavailable
from kubeacc.node.cyborg.records import profile_name
from kubeacc.testbed.cyborgcloud import FAKE_SLOTS, CyborgCloud
from tests.agent.dra.memclaims import Claims
from tests.conftest import CYBORG_NODE
from tests.testbed.helpers import eventually

from .conftest import PROJECT, USER, credentials, cyborg_driver, leftover

pytestmark = pytest.mark.cyborg


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


def test_units_another_consumer_holds_are_not_published(
    cyborg_cloud: CyborgCloud, backend: CyborgBackend
) -> None:
    rp = backend.discover().devices[0].attributes["resourceProvider"]
    server = str(uuid.uuid4())  # a Nova server, say
    body = {
        "allocations": {rp: {"resources": {"FPGA": 3}}},
        "project_id": PROJECT,
        "user_id": USER,
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    cyborg_cloud.placement("PUT", f"/allocations/{server}", body)
    assert len(backend.discover().devices) == FAKE_SLOTS - 3
    cyborg_cloud.placement("DELETE", f"/allocations/{server}")
    assert len(backend.discover().devices) == FAKE_SLOTS


def test_cyborg_unreachable_is_a_clear_error_and_leaves_nothing(
    cyborg_cloud: CyborgCloud, tmp_path: Path
) -> None:
    creds = msgspec.structs.replace(credentials(cyborg_cloud), cyborg_url="http://127.0.0.1:9")
    down = CyborgBackend(creds, CYBORG_NODE, tmp_path / "state", None)
    with pytest.raises(CyborgUnavailable, match=r"Cyborg at http://127\.0\.0\.1:9 not reached"):
        down.discover()


@pytest.mark.parametrize("service", ["cyborg-conductor", "cyborg-api", "rabbitmq"])
def test_a_service_down_mid_prepare_is_undone_once_it_is_back(
    cyborg_cloud: CyborgCloud, backend: CyborgBackend, tmp_path: Path, service: str
) -> None:
    uid = str(uuid.uuid4())
    names = [d.name for d in backend.discover().devices[:1]]
    driver = cyborg_driver(tmp_path, _claims(names, uid), backend)
    driver.reconcile()
    cyborg_cloud.procs[service].stop()
    try:
        out = driver.prepare([ClaimRef("ns", "c", uid)])
    finally:
        cyborg_cloud.procs[service].start()
    assert "Cyborg" in out[uid].error
    assert driver.prepared() == {}

    def undone() -> bool:
        """A discovery pass (it retries the undo) once the service answers again; then nothing
        of the claim left."""
        try:
            backend.discover()
            return leftover(cyborg_cloud) == {"arqs": [], "allocations": {}}
        except (CyborgError, OSError):
            return False

    eventually(undone, 90, "the half-made ARQ and allocation undone")
    assert backend.records.all() == []

    def rpc_works() -> bool:
        """Cyborg's API reaches its conductor again (after RabbitMQ, oslo.messaging takes a
        while to reconnect): the next test starts on a whole cloud."""
        name = f"probe-{uuid.uuid4().hex[:8]}"
        try:
            backend.client.ensure_profile(name, {"resources:FPGA": "1"})
        except CyborgError:
            return False
        cyborg_cloud.cyborg("DELETE", f"/v2/device_profiles/{name}")
        return True

    eventually(rpc_works, 90, "Cyborg's API and conductor talking again")


def test_start_deletes_the_nodes_unrecorded_arqs_and_no_one_elses(
    cyborg_cloud: CyborgCloud, backend: CyborgBackend
) -> None:
    """An ARQ of this node's profile that no record names (made just before a crash, its UUID
    never written) is deleted at start; an ARQ of someone else's profile is left alone."""
    dev = backend.discover().devices[0]
    rp = dev.attributes["resourceProvider"]
    group = {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}
    own = profile_name(CYBORG_NODE, rp)
    backend.client.ensure_profile(own, group)
    backend.client.ensure_profile("someone-elses", group)
    orphan = backend.client.create_arq(own)
    foreign = backend.client.create_arq("someone-elses")
    backend.kind.recover(set())
    left = {a["uuid"] for a in leftover(cyborg_cloud)["arqs"]}
    assert orphan not in left
    assert foreign in left
