"""A prepared claim's FPGA after a node reboot or power cycle (issue 46): the kubelet asks again
for the pods it restarts, and the card may have lost its bitstream. The driver checks the card
before it answers from its checkpoint and loads the bitstream again when it is gone; a refusal
is the claim's error (the container does not start on an empty card). The programmer is a
stand-in at its boundary (the real one, through the synthetic kernel, is exercised by
tests/agent/test_fpga_claim.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.agent.dra.driver import ClaimRef
from kubeacc.agent.dra.fpga.conditions import NotProgrammed
from kubeacc.agent.fpga_claims import ProgrammingRefused
from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.model import DeviceType
from kubeacc.synthetic import profiles
from tests.agent.dra.memclaims import Claims, memory_driver
from tests.hosts import discover

DIGEST = "sha256:" + "ab" * 32


class Cards:
    """What each card carries, and the programmer's two calls on it."""

    def __init__(self) -> None:
        self.carries: dict[str, str] = {}
        self.loads: list[str] = []
        self.refuse = False

    def ensure(self, device: str, bitstream: str, digest: str) -> str:
        if self.refuse:
            raise ProgrammingRefused(f"BitstreamNotAllowed: {bitstream}")
        if self.carries.get(device) != digest:
            self.carries[device] = digest
            self.loads.append(device)
        return f"{device} carries {bitstream}"

    def verify(self, device: str, bitstream: str, digest: str) -> str:
        if self.carries.get(device) != digest:
            raise NotProgrammed(f"NotProgrammed: {device} carries nothing of {bitstream}")
        return "ok"


def test_a_card_that_lost_its_bitstream_is_loaded_again(tmp_path: Path) -> None:
    inv = discover(profiles.build("intel-fpga-dfl", tmp_path / "host"))
    fpga = next(d for d in inv.by_type(DeviceType.FPGA))
    claims = Claims()
    claims.add(
        "f",
        "u1",
        [fpga.name],
        config=[{"source": "FromClaim", **fpga_claim_config("a.gbs", DIGEST, ("r",))}],
    )
    cards = Cards()
    driver = memory_driver(tmp_path, claims, inv)
    driver.fpga, driver.fpga_verify = cards.ensure, cards.verify
    ref = ClaimRef("ns", "f", "u1")
    assert driver.prepare([ref])["u1"].error == ""
    assert cards.loads == [fpga.name]
    assert driver.prepare([ref])["u1"].error == ""  # asked again, the card as it was
    assert cards.loads == [fpga.name]
    cards.carries.clear()  # the node rebooted: the card came up empty
    assert driver.prepare([ref])["u1"].error == ""
    assert cards.loads == [fpga.name, fpga.name]
    cards.carries.clear()
    cards.refuse = True  # ... and the bitstream is no longer allowed: the claim's error
    err = driver.prepare([ref])["u1"].error
    assert err.startswith("ResourceClaim ns/f: device ") and "BitstreamNotAllowed" in err
    assert set(driver.prepared()) == {"u1"}  # still prepared: unprepare is the kubelet's
    # the agent's own start checks the cards too (the kubelet may not ask again)
    cards.refuse = False
    driver.checkpoint.close()
    again = memory_driver(tmp_path, claims, inv)
    again.fpga, again.fpga_verify = cards.ensure, cards.verify
    again.reconcile()
    assert cards.loads == [fpga.name, fpga.name, fpga.name]


@pytest.mark.parametrize("verify", [True, False])
def test_without_a_check_nothing_is_loaded_again(tmp_path: Path, verify: bool) -> None:
    """An agent without a bitstream library (no programmer) answers from its checkpoint."""
    inv = discover(profiles.build("dgx-h100", tmp_path / "host"))
    gpu = next(d for d in inv.by_type(DeviceType.GPU))
    claims = Claims()
    claims.add("g", "u1", [gpu.name])
    driver = memory_driver(tmp_path, claims, inv)
    cards = Cards()
    if verify:
        driver.fpga_verify = cards.verify  # a GPU claim records no bitstream: nothing checked
    ref = ClaimRef("ns", "g", "u1")
    assert driver.prepare([ref])["u1"].error == ""
    assert driver.prepare([ref])["u1"].error == ""
    assert cards.loads == []
