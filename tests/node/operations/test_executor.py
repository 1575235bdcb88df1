"""The node-side actions on a synthetic host, without a cluster."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

from kubeacc.crds.apiread import operation_spec
from kubeacc.crds.views import OperationSpecView
from kubeacc.host.kernel import HostError
from kubeacc.model import Device
from kubeacc.node.operations.bitstreams import BitstreamLibrary, make_gbs, parse_gbs
from kubeacc.node.operations.executor import Executor
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from tests.hosts import discover

IFACE0 = "69528db6eb31577a8c3668f9faa081f6"
AFU = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, SyntheticKernel, Executor, Path]:
    root = build("intel-fpga-dfl", tmp_path / "root")
    lib = tmp_path / "lib"
    lib.mkdir()
    kernel = SyntheticKernel(root)

    def rediscover(name: str) -> Device | None:
        return {d.name: d for d in discover(root).devices}.get(name)

    return (
        root,
        kernel,
        Executor(SyntheticHost(root, kernel=kernel), BitstreamLibrary(lib), rediscover),
        lib,
    )


def _dev(root: Path, name: str = "fpga-0000-3b-00-0") -> Device:
    return {d.name: d for d in discover(root).devices}[name]


def test_library_refuses_names_that_leave_it(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    (lib / "sub").mkdir(parents=True)
    (tmp_path / "outside.gbs").write_bytes(b"x")
    (lib / "link.gbs").symlink_to(tmp_path / "outside.gbs")
    (lib / "sub" / "ok.gbs").write_bytes(b"y")
    (lib / "inner.gbs").symlink_to(lib / "sub" / "ok.gbs")
    library = BitstreamLibrary(lib)
    for bad in ("../outside.gbs", "/etc/passwd", "sub/../../outside.gbs", "link.gbs", "", "./x"):
        with pytest.raises(HostError) as err:
            library.resolve(bad)
        assert err.value.reason in ("InvalidBitstreamName", "BitstreamNotFound"), bad
    assert library.resolve("sub/ok.gbs").name == "ok.gbs"
    assert library.resolve("inner.gbs").name == "ok.gbs"  # a link inside the library is fine


def test_a_claims_name_cannot_leave_the_library_through_a_directory_link_or_a_special_file(
    tmp_path: Path,
) -> None:
    """Issue 43: the name is a namespace user's (a claim's FpgaConfig). A directory link in the
    library leading out, a link chain leading out, a FIFO and a directory are all refused by
    name before anything is read."""
    lib = tmp_path / "lib"
    lib.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "host.gbs").write_bytes(b"x")
    (lib / "dirlink").symlink_to(outside)
    (lib / "relative").symlink_to("../outside")
    (lib / "hop").symlink_to("dirlink/host.gbs")
    os.mkfifo(lib / "fifo.gbs")
    (lib / "dir.gbs").mkdir()
    library = BitstreamLibrary(lib)
    for bad in ("dirlink/host.gbs", "relative/host.gbs", "hop", "fifo.gbs", "dir.gbs"):
        with pytest.raises(HostError) as err:
            library.resolve(bad)
        assert err.value.reason in ("InvalidBitstreamName", "BitstreamNotFound"), bad


def test_gbs_round_trip_and_damage() -> None:
    data = make_gbs(AFU, IFACE0, b"bits")
    image = parse_gbs("a.gbs", "d", data)
    assert image.afu_id == AFU and image.interface_id == IFACE0 and image.payload == b"bits"
    for broken in (b"not a gbs", data[:30], data[:16] + b"\xff\xff\xff\x00" + data[20:]):
        with pytest.raises(HostError) as err:
            parse_gbs("a.gbs", "d", broken)
        assert err.value.reason == "InvalidBitstream"


def test_program_checks_digest_allow_list_and_fim(
    host: tuple[Path, SyntheticKernel, Executor, Path],
) -> None:
    root, kernel, ex, lib = host
    data = make_gbs(AFU, IFACE0, b"bits")
    (lib / "a.gbs").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    dev = _dev(root)
    before = dev.fpga.afu_id if dev.fpga else None

    def op(sha256: str) -> OperationSpecView:
        return _spec(
            {
                "action": "Program",
                "targets": ["x"],
                "program": {"bitstream": "a.gbs", "sha256": sha256},
            }
        )

    out = ex.run(op(sha), dev, host_driver=None, allowed_digests=set())
    assert (out.ok, out.reason) == (False, "BitstreamNotAllowed")
    out = ex.run(op("f" * 64), dev, host_driver=None, allowed_digests={"f" * 64})
    assert (out.ok, out.reason) == (False, "DigestMismatch")
    other = _dev(root, "fpga-0000-af-00-0")  # a different FIM
    out = ex.run(op(sha), other, host_driver=None, allowed_digests={sha})
    assert (out.ok, out.reason) == (False, "IncompatibleBitstream")
    assert not any("PR" in v for _, v in kernel.writes)
    assert (_dev(root).fpga or dev.fpga).afu_id == before  # type: ignore[union-attr]

    out = ex.run(op(sha), dev, host_driver=None, allowed_digests={sha})
    assert out.ok and out.afu_id == AFU
    assert _dev(root).fpga.afu_id == AFU  # type: ignore[union-attr]


def test_attach_rolls_back_when_vfio_bind_fails(
    host: tuple[Path, SyntheticKernel, Executor, Path],
) -> None:
    root, kernel, ex, _ = host
    dev = _dev(root)
    kernel.fail_bind.add("vfio-pci")
    attach = _spec({"action": "Attach", "targets": ["x"]})
    out = ex.run(attach, dev, host_driver=None, allowed_digests=set())
    assert not out.ok and "restored dfl-pci" in out.message
    sysfs = root / "sys/bus/pci/devices/0000:3b:00.0"
    assert (sysfs / "driver").resolve().name == "dfl-pci"
    assert (sysfs / "driver_override").read_text().strip() == "(null)"

    kernel.fail_bind.clear()
    assert ex.run(attach, dev, host_driver=None, allowed_digests=set()).ok
    assert (sysfs / "driver").resolve().name == "vfio-pci"
    detach = _spec({"action": "Detach", "targets": ["x"]})
    out = ex.run(detach, dev, host_driver=None, allowed_digests=set())
    assert (out.ok, out.reason) == (False, "NoHostDriver")
    assert ex.run(detach, dev, host_driver="dfl-pci", allowed_digests=set()).ok
    assert (sysfs / "driver").resolve().name == "dfl-pci"


def test_power_and_reset_write_sysfs(host: tuple[Path, SyntheticKernel, Executor, Path]) -> None:
    root, kernel, ex, _ = host
    dev = _dev(root)
    for spec in (
        {"action": "Reset", "targets": ["x"]},
        {"action": "Power", "targets": ["x"], "power": {"state": "Cycle"}},
    ):
        out = ex.run(
            _spec(spec),
            dev,
            host_driver=None,
            allowed_digests=set(),
        )
        assert out.ok, out
    assert kernel.writes == [
        ("/sys/bus/pci/devices/0000:3b:00.0/reset", "1"),
        ("/sys/bus/pci/devices/0000:3b:00.0/remove", "1"),
        ("/sys/bus/pci/rescan", "1"),
    ]


def _spec(spec: Mapping[str, object]) -> OperationSpecView:
    """The spec as the agent reads it (kubeacc.crds.apiread)."""
    return operation_spec({"spec": spec})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"action": "Power"}, "spec.power is required for action Power"),
        ({"action": "Program"}, "spec.program is required for action Program"),
        ({"action": "MigMode"}, "spec.migMode is required for action MigMode"),
    ],
)
def test_an_action_without_its_section_fails_clearly(
    host: tuple[Path, SyntheticKernel, Executor, Path], spec: dict[str, object], message: str
) -> None:
    """What the CRD's rules require and an old CRD lets through: refused, the host untouched."""
    root, kernel, ex, _ = host
    out = ex.run(_spec(spec), _dev(root), host_driver=None, allowed_digests=set())
    assert (out.ok, out.reason, out.message) == (False, "InvalidSpec", message)
    assert kernel.writes == []
