"""FPGA programming routed to Cyborg: the life-cycle agent's Cyborg side against the real Cyborg,
Placement and Glance of the lane, and Cyborg's own Intel FPGA driver on a synthetic PAC card
(kubeacc.testbed.cyborgfpga). What is checked is what the services and the card show afterwards:
Glance's images, the runs of ``fpgaconf``, the card's ``afu_id`` and Cyborg's deployable."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest

from kubeacc.crds.apiread import operation_spec
from kubeacc.host.kernel import HostError
from kubeacc.lifecycle.cyborgops import CyborgOperations
from kubeacc.model import Device
from kubeacc.node.cyborg.glance import GlanceImages, image_name
from kubeacc.node.cyborg.inventory import deployable_traits
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.testbed.cyborgcloud import CyborgCloud
from kubeacc.testbed.cyborgfpga import FpgaHost
from kubeacc.testbed.procs import free_port
from tests.conftest import CYBORG_FPGA_NODE
from tests.lifecycle.cyborgparts import credentials, glance_images, operations, sha

pytestmark = pytest.mark.cyborg

AFU = "5eed0000c0ffee00c0ffee0000005eed"
OTHER_AFU = "0a0b0c0d0e0f10111213141516171819"


@pytest.fixture
def card(cyborg_cloud: CyborgCloud) -> FpgaHost:
    return cyborg_cloud.fpga[CYBORG_FPGA_NODE]


@pytest.fixture
def library(tmp_path: Path, card: FpgaHost) -> Path:
    lib = tmp_path / "bitstreams"
    lib.mkdir()
    fim = card.interface_id()
    (lib / "afu.gbs").write_bytes(make_gbs(AFU, fim, b"\x5e" * 4096))
    (lib / "other.gbs").write_bytes(make_gbs(OTHER_AFU, fim, b"\x0a" * 2048))
    (lib / "wrong-fim.gbs").write_bytes(make_gbs(AFU, "1" * 32, b"\x01" * 512))
    return lib


def the_fpga(ops: CyborgOperations) -> Device:
    (dev,) = ops.discover().values()
    return dev


def test_the_pac_card_is_cyborgs_deployable_and_a_kube_acc_device(
    cyborg_cloud: CyborgCloud, library: Path, card: FpgaHost
) -> None:
    dev = the_fpga(operations(cyborg_cloud, library))
    assert dev.type.value == "fpga"
    assert dev.fpga is not None and dev.fpga.interface_id == card.interface_id()
    dep = cyborg_cloud.cyborg("GET", f"/v2/deployables/{dev.attributes['cyborgDeployable']}")
    assert dep["driver_name"] == "intel"
    traits = deployable_traits(dep)
    assert f"CUSTOM_FPGA_REGION_INTEL_{card.interface_id().upper()}" in traits


def test_program_goes_through_glance_and_cyborg_and_the_card_reports_the_afu(
    cyborg_cloud: CyborgCloud, library: Path, card: FpgaHost
) -> None:
    ops = operations(cyborg_cloud, library)
    dev = the_fpga(ops)
    runs = len(card.fpgaconf_runs())
    digest = sha(library / "afu.gbs")
    out = ops.program(dev, "afu.gbs", digest, {digest})
    assert out.ok, out
    assert out.reason == "Programmed" and out.afu_id == AFU
    assert "uploaded to Glance" in out.message
    assert card.afu_id() == AFU
    assert card.fpgaconf_runs()[runs:] == [{"bdf": card.bdf, "ok": True, "afu": AFU}]
    dep = cyborg_cloud.cyborg("GET", f"/v2/deployables/{dev.attributes['cyborgDeployable']}")
    assert f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{AFU.upper()}" in deployable_traits(dep)
    mine = [i for i in glance_images(cyborg_cloud) if i["name"] == image_name(digest)]
    assert [(i["status"], i["size"]) for i in mine] == [
        ("active", (library / "afu.gbs").stat().st_size)
    ]

    # the same bitstream again: Glance's image is used again, Cyborg programs the card again
    again = ops.program(dev, "afu.gbs", digest, {digest})
    assert again.ok and "found in Glance" in again.message, again
    assert len(card.fpgaconf_runs()) == runs + 2
    assert [i["id"] for i in glance_images(cyborg_cloud) if i["name"] == image_name(digest)] == [
        mine[0]["id"]
    ]


@pytest.mark.parametrize(
    ("name", "digest", "allowed", "reason"),
    [
        ("afu.gbs", "0" * 64, True, "DigestMismatch"),
        ("missing.gbs", "0" * 64, True, "BitstreamNotFound"),
        ("../afu.gbs", "0" * 64, True, "InvalidBitstreamName"),
        ("afu.gbs", "", False, "BitstreamNotAllowed"),
        ("wrong-fim.gbs", "", True, "IncompatibleBitstream"),
    ],
)
def test_a_refused_bitstream_uploads_and_programs_nothing(
    cyborg_cloud: CyborgCloud,
    library: Path,
    card: FpgaHost,
    name: str,
    digest: str,
    allowed: bool,
    reason: str,
) -> None:
    ops = operations(cyborg_cloud, library)
    dev = the_fpga(ops)
    digest = digest or sha(library / name)
    before = (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id())
    with pytest.raises(HostError) as err:
        ops.program(dev, name, digest, {digest} if allowed else set())
    assert err.value.reason == reason
    assert (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id()) == before


def test_a_deployable_allocated_in_placement_is_not_programmed(
    cyborg_cloud: CyborgCloud, library: Path, card: FpgaHost
) -> None:
    ops = operations(cyborg_cloud, library)
    dev = the_fpga(ops)
    rp = dev.attributes["resourceProvider"]
    server = str(uuid.uuid4())  # a Nova server's allocation, or a claim of kube-acc's
    ops.client.allocate(server, {rp: {"FPGA": 1}})
    digest = sha(library / "other.gbs")
    before = (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id())
    try:
        with pytest.raises(HostError) as err:
            ops.program(dev, "other.gbs", digest, {digest})
    finally:
        cyborg_cloud.placement("DELETE", f"/allocations/{server}")
    assert err.value.reason == "DeviceInUse" and server in err.value.message
    assert (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id()) == before


def test_without_glance_in_the_credentials_program_is_refused(
    cyborg_cloud: CyborgCloud, library: Path, card: FpgaHost
) -> None:
    ops = operations(cyborg_cloud, library, glance_url="")
    digest = sha(library / "other.gbs")
    before = (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id())
    with pytest.raises(HostError) as err:
        ops.program(the_fpga(ops), "other.gbs", digest, {digest})
    assert err.value.reason == "GlanceNotConfigured" and "glanceUrl" in err.value.message
    assert (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id()) == before


@pytest.mark.parametrize("down", ["glance_url", "cyborg_url"])
def test_glance_or_cyborg_down_fails_clearly_and_programs_nothing(
    cyborg_cloud: CyborgCloud, library: Path, card: FpgaHost, down: str
) -> None:
    dev = the_fpga(operations(cyborg_cloud, library))
    ops = operations(cyborg_cloud, library, **{down: f"http://127.0.0.1:{free_port()}"})
    digest = sha(library / "other.gbs")
    before = (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id())
    out = ops.program(dev, "other.gbs", digest, {digest})
    assert not out.ok and out.reason == "ServiceUnavailable"
    service = "Glance" if down == "glance_url" else "Cyborg"
    assert f"{service} at http://127.0.0.1:" in out.message and "not reached" in out.message
    assert (glance_images(cyborg_cloud), card.fpgaconf_runs(), card.afu_id()) == before


def test_an_interrupted_upload_is_removed_before_the_next(
    cyborg_cloud: CyborgCloud, library: Path
) -> None:
    images = GlanceImages(credentials(cyborg_cloud))
    data = (library / "other.gbs").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    # what a crash between Glance's image and its data leaves: a queued image of that name
    queued = images.api.call(
        "POST",
        "/v2/images",
        {
            "name": image_name(digest),
            "disk_format": "raw",
            "container_format": "bare",
            "kubeacc_sha256": digest,
        },
    )["id"]
    got, uploaded = images.ensure(digest, data)
    assert uploaded and got != queued
    left = [(i["id"], i["status"]) for i in glance_images(cyborg_cloud)]
    assert (queued, "queued") not in left and (got, "active") in left
    images.delete(got)


@pytest.mark.parametrize(
    ("action", "extra", "ok", "reason"),
    [
        ("Reset", {}, False, "NotSupportedByCyborg"),
        ("Power", {"power": {"state": "Off"}}, False, "NotSupportedByCyborg"),
        ("Attach", {}, False, "NotSupportedByCyborg"),
        ("Drain", {}, True, "Nothing"),
    ],
)
def test_actions_cyborg_has_not_are_refused_and_touch_nothing(
    cyborg_cloud: CyborgCloud,
    library: Path,
    card: FpgaHost,
    action: str,
    extra: dict[str, Any],
    ok: bool,
    reason: str,
) -> None:
    ops = operations(cyborg_cloud, library)
    dev = the_fpga(ops)
    spec = operation_spec({"spec": {"action": action, "targets": ["x"], **extra}})
    before = card.fpgaconf_runs()
    out = ops.run(spec, dev, allowed_digests=set())
    assert (out.ok, out.reason) == (ok, reason)
    assert card.fpgaconf_runs() == before
