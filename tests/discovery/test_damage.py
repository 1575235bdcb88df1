"""Damaged host data: a warning that names the device and the path, never an exception."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubeacc.model import DeviceType, Inventory
from tests.hosts import HostFactory, discover


def _sysfs_dir(root: Path, bdf: str) -> Path:
    return Path(os.path.realpath(root / "sys/bus/pci/devices" / bdf))


def _first(inv: Inventory, dtype: DeviceType) -> str:
    bdf = inv.by_type(dtype)[0].pci_bus_id
    assert bdf
    return bdf


def test_garbage_numa_node(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    bdf = _first(discover(root), DeviceType.GPU)
    (_sysfs_dir(root, bdf) / "numa_node").write_text("banana\n")
    inv = discover(root)
    gpu = next(d for d in inv.devices if d.pci_bus_id == bdf)
    assert gpu.numa_node == -1
    warning = next(w for w in inv.warnings if w.path.endswith("/numa_node"))
    assert warning.device == gpu.name
    assert bdf in warning.path
    assert len(inv.by_type(DeviceType.GPU)) == 8


def test_dangling_device_symlink_skips_only_that_function(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    bdf = _first(discover(root), DeviceType.NIC)
    shutil.rmtree(_sysfs_dir(root, bdf))
    inv = discover(root)
    assert len(inv.by_type(DeviceType.NIC)) == 7
    assert len(inv.by_type(DeviceType.GPU)) == 8
    warning = next(w for w in inv.warnings if w.device == bdf)
    assert "dangling" in warning.message
    assert warning.path == f"/sys/bus/pci/devices/{bdf}"


def test_truncated_proc_information(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    bdf = _first(discover(root), DeviceType.GPU)
    info = root / "proc/driver/nvidia/gpus" / bdf / "information"
    info.write_text(info.read_text()[:25])
    inv = discover(root, nvml="off")
    gpu = next(d for d in inv.devices if d.pci_bus_id == bdf)
    assert gpu.type is DeviceType.GPU
    assert any(w.device == gpu.name and w.path.endswith("information") for w in inv.warnings)
    assert len(inv.by_type(DeviceType.GPU)) == 8


def test_unreadable_vendor_file_and_directory_in_place_of_file(hosts: HostFactory) -> None:
    root = hosts.copy("kunlun-xpu")
    inv = discover(root)
    first, second = (x.pci_bus_id for x in inv.by_type(DeviceType.XPU)[:2])
    assert first and second
    (_sysfs_dir(root, first) / "vendor").write_bytes(b"\xff\xfe\x00garbage")
    numa = _sysfs_dir(root, second) / "numa_node"
    numa.unlink()
    numa.mkdir()
    inv = discover(root)
    xpus = {x.pci_bus_id: x for x in inv.by_type(DeviceType.XPU)}
    assert first not in xpus and len(xpus) == 7
    assert xpus[second].numa_node == -1
    assert any(w.device == first and w.path.endswith("/vendor") for w in inv.warnings)
    assert any("directory" in w.message and w.path.endswith("numa_node") for w in inv.warnings)


def test_symlink_loop_and_absolute_link_stay_inside_the_root(hosts: HostFactory) -> None:
    root = hosts.copy("edge-mixed")
    devices = root / "sys/bus/pci/devices"
    os.symlink("loop-b", devices / "0000:ff:00.0")
    os.symlink("0000:ff:00.0", devices / "loop-b")
    # An absolute link is resolved inside the host root, never on the machine running us.
    os.symlink("/sys/devices/does-not-exist", devices / "0000:fe:00.0")
    inv = discover(root)
    assert len(inv.devices) == 4
    assert any(w.device == "0000:ff:00.0" for w in inv.warnings)
    assert any(w.device == "0000:fe:00.0" for w in inv.warnings)


def test_missing_pci_bus_directory(tmp_path: Path) -> None:
    inv = discover(tmp_path)
    assert inv.devices == []
    assert any(w.path == "/sys/bus/pci/devices" for w in inv.warnings)


# -- random damage --------------------------------------------------------------------------

_DAMAGE = st.sampled_from(["delete", "garbage", "binary", "truncate", "dir", "dangle", "loop"])


def _targets(root: Path) -> list[Path]:
    """Every file and symlink discovery may read (CPU topology files left out: never read)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath.endswith("/sys/devices/system/cpu"):
            dirnames.clear()
            continue
        here = Path(dirpath)
        found.extend(here / f for f in filenames)
        found.extend(here / d for d in dirnames if (here / d).is_symlink())
    return sorted(found)


def _damage(path: Path, how: str, data: bytes) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if how == "delete":
        return
    if how == "garbage":
        path.write_bytes(data.decode("latin-1").encode("utf-8", "replace")[:64])
    elif how == "binary":
        path.write_bytes(data)
    elif how == "truncate":
        path.write_bytes(data[:1])
    elif how == "dir":
        path.mkdir()
    elif how == "dangle":
        os.symlink("../../nowhere/at/all", path)
    elif how == "loop":
        os.symlink(path.name, path)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    profile=st.sampled_from(
        ["edge-mixed", "intel-fpga-dfl", "intel-fpga-opae", "kunlun-xpu", "aws-f1", "amd-gpu"]
    ),
    picks=st.lists(st.tuples(st.integers(0, 10**6), _DAMAGE, st.binary(max_size=32)), max_size=8),
)
def test_random_damage_never_raises(hosts: HostFactory, profile: str, picks) -> None:  # type: ignore[no-untyped-def]
    root = hosts.copy(profile)
    targets = _targets(root)
    for index, how, data in picks:
        _damage(targets[index % len(targets)], how, data)
    inv = discover(root)
    # Whatever was found is still a valid, serialisable inventory.
    assert Inventory.from_json_dict(inv.to_json_dict()) == inv
    for dev in inv.devices:
        assert dev.numa_node >= -1
    shutil.rmtree(root)
