"""The testbed's ``fpgaconf`` on a synthetic PAC host tree (the part that runs under Cyborg's
privsep daemon in the Cyborg lane): it programs the card the way the real tool would."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.hosts_fpga import PAC_ARRIA10, intel_pac_opae
from kubeacc.synthetic.tools.fpgaconf import main, program
from kubeacc.synthetic.tree import HostBuilder

AFU = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, str]:
    bdf = intel_pac_opae(HostBuilder(tmp_path / "host", seed="t"))
    return tmp_path / "host" / "sys", bdf


def _afu(sys_root: Path, bdf: str) -> str:
    (port,) = (sys_root / "bus/pci/devices" / bdf).glob("fpga/*/intel-fpga-port.*")
    return (port / "afu_id").read_text().strip()


def test_the_card_runs_the_gbs_afu_after_programming(
    host: tuple[Path, str], tmp_path: Path
) -> None:
    sys_root, bdf = host
    gbs = tmp_path / "a.gbs"
    gbs.write_bytes(make_gbs(AFU, PAC_ARRIA10.compat_id, b"\x01" * 100))
    assert _afu(sys_root, bdf) == "0" * 32
    assert program(bdf, gbs, sys_root) == AFU
    assert _afu(sys_root, bdf) == AFU


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (make_gbs(AFU, "1" * 32, b"\x01" * 100), "does not match the FIM"),
        (b"not a bitstream at all", "not a GBS file"),
        (make_gbs(AFU, PAC_ARRIA10.compat_id, b""), "no bitstream after"),
    ],
)
def test_a_bitstream_the_card_cannot_take_is_refused(
    host: tuple[Path, str], tmp_path: Path, data: bytes, message: str
) -> None:
    sys_root, bdf = host
    gbs = tmp_path / "b.gbs"
    gbs.write_bytes(data)
    with pytest.raises(ValueError, match=message):
        program(bdf, gbs, sys_root)
    assert _afu(sys_root, bdf) == "0" * 32


def test_no_card_at_the_address_is_exit_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gbs = tmp_path / "a.gbs"
    gbs.write_bytes(make_gbs(AFU, PAC_ARRIA10.compat_id, b"\x01"))
    assert main(["--bus", "0x99", "--device", "0x00", "--function", "0x0", str(gbs)]) == 1
    assert "no suitable slots found" in capsys.readouterr().err
