"""Layout invariants every synthetic host must satisfy, checked with plain os/pathlib."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kubeacc.synthetic import profiles

from .synth_helpers import all_symlinks, pci_devices, read, snapshot

NAMES = profiles.NAMES
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")


@pytest.mark.parametrize("name", NAMES)
def test_every_symlink_is_relative_and_resolves_inside_the_root(
    built: dict[str, Path], name: str
) -> None:
    root = built[name].resolve()
    links = all_symlinks(root)
    assert links
    for link in links:
        target = os.readlink(link)
        assert not target.startswith("/"), f"{link} -> {target} is absolute"
        resolved = link.resolve()
        assert resolved.exists(), f"{link} -> {target} dangles"
        assert resolved.is_relative_to(root), f"{link} escapes the host root"


@pytest.mark.parametrize("name", NAMES)
def test_pci_devices_resolve_to_function_dirs(built: dict[str, Path], name: str) -> None:
    root = built[name].resolve()
    devices = pci_devices(root)
    assert devices
    assert (root / "sys/bus/pci/rescan").is_file()
    for bdf, d in devices.items():
        assert BDF.match(bdf)
        assert d.name == bdf
        assert d.is_relative_to(root / "sys/devices")
        top = d.relative_to(root / "sys/devices").parts[0]
        assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", top)
        for attr in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
            assert re.fullmatch(r"0x[0-9a-f]{4}", read(d / attr)), (bdf, attr)
        assert re.fullmatch(r"0x[0-9a-f]{6}", read(d / "class"))
        assert re.fullmatch(r"0x[0-9a-f]{2}", read(d / "revision"))
        assert int(read(d / "numa_node")) >= -1
        assert read(d / "local_cpulist")
        assert read(d / "driver_override") == "(null)"
        for f in ("enable", "reset", "remove"):
            assert (d / f).is_file()
        config = (d / "config").read_bytes()
        assert len(config) == 256
        assert int.from_bytes(config[0:2], "little") == int(read(d / "vendor"), 16)


@pytest.mark.parametrize("name", NAMES)
def test_bridges_chain_to_the_root_complex(built: dict[str, Path], name: str) -> None:
    root = built[name].resolve()
    for bdf, d in pci_devices(root).items():
        parent = d.parent
        bus = int(bdf.split(":")[1], 16)
        if (d / "physfn").exists():
            assert (d / "physfn").resolve().parent == parent
            continue
        if parent.name.startswith("pci"):
            assert not (parent / "vendor").exists()
            assert int(parent.name.split(":")[1], 16) == bus
            continue
        assert read(parent / "class").startswith("0x0604"), f"{bdf}: parent is not a bridge"
        assert int(read(parent / "secondary_bus_number")) == bus
        assert int(read(parent / "subordinate_bus_number")) >= bus
        assert (root / "sys/bus/pci/devices" / parent.name).resolve() == parent


@pytest.mark.parametrize("name", NAMES)
def test_driver_and_iommu_links_point_both_ways(built: dict[str, Path], name: str) -> None:
    root = built[name].resolve()
    for bdf, d in pci_devices(root).items():
        if (d / "driver").is_symlink():
            drv = (d / "driver").resolve()
            assert drv.parent == root / "sys/bus/pci/drivers"
            assert (drv / "bind").is_file() and (drv / "unbind").is_file()
            assert (drv / bdf).resolve() == d
        if (d / "iommu_group").is_symlink():
            group = (d / "iommu_group").resolve()
            assert group.parent == root / "sys/kernel/iommu_groups"
            assert (group / "devices" / bdf).resolve() == d


@pytest.mark.parametrize("name", NAMES)
def test_sriov_pf_and_vfs_point_at_each_other(built: dict[str, Path], name: str) -> None:
    root = built[name].resolve()
    for d in pci_devices(root).values():
        if not (d / "sriov_totalvfs").exists():
            continue
        num = int(read(d / "sriov_numvfs"))
        assert num <= int(read(d / "sriov_totalvfs"))
        links = sorted(p for p in d.iterdir() if p.name.startswith("virtfn"))
        assert len(links) == num
        for i in range(num):
            link = d / f"virtfn{i}"
            assert os.readlink(link).startswith("../")
            vf = link.resolve()
            assert vf.parent == d.parent
            assert (vf / "physfn").resolve() == d
            assert read(vf / "device") == "0x" + read(d / "sriov_vf_device")
            assert read(vf / "vendor") == read(d / "vendor")
            assert read(vf / "numa_node") == read(d / "numa_node")


@pytest.mark.parametrize("name", NAMES)
def test_class_links_resolve_to_class_devices(built: dict[str, Path], name: str) -> None:
    root = built[name].resolve()
    devices = set(pci_devices(root).values())
    for cls in ("net", "infiniband", "drm", "infiniband_verbs", "nvme"):
        d = root / "sys/class" / cls
        if not d.exists():
            continue
        for entry in d.iterdir():
            if not entry.is_symlink():
                continue
            target = entry.resolve()
            assert target.is_dir() and target.name == entry.name
            if entry.name == "lo":
                continue
            assert (target / "device").resolve() in devices
            assert target.parent.parent in devices
    for ifname in (root / "sys/class/net").iterdir():
        if ifname.name == "lo":
            continue
        for attr in ("address", "operstate", "mtu", "speed", "ifindex", "type"):
            assert (ifname / attr).is_file(), (ifname, attr)
    drm = root / "sys/class/drm"
    if drm.exists():
        for entry in drm.iterdir():
            assert (root / "dev/dri" / entry.name).is_file()


@pytest.mark.parametrize("name", NAMES)
def test_numa_and_host_files(built: dict[str, Path], name: str) -> None:
    root = built[name]
    node = root / "sys/devices/system/node"
    online = read(node / "online")
    count = 1 if online == "0" else int(online.split("-")[1]) + 1
    assert read(node / "possible") == online
    for n in range(count):
        dist = read(node / f"node{n}/distance").split()
        assert len(dist) == count and dist[n] == "10"
        assert read(node / f"node{n}/cpulist")
    assert read(root / "etc/hostname")
    assert "processor" in (root / "proc/cpuinfo").read_text()
    assert read(root / ".synthetic/profile") == name


@pytest.mark.parametrize("name", NAMES)
def test_pci_ids_names_what_the_host_has(built: dict[str, Path], name: str) -> None:
    root = built[name]
    text = (root / "usr/share/misc/pci.ids").read_text()
    vendors: dict[str, set[str]] = {}
    current = ""
    for line in text.splitlines():
        if not line or line.startswith("#") or line.startswith("C "):
            current = "" if line.startswith("C ") else current
            continue
        if m := re.fullmatch(r"([0-9a-f]{4})  \S.*", line):
            current = m.group(1)
            vendors[current] = set()
        elif current and (m := re.fullmatch(r"\t([0-9a-f]{4})  \S.*", line)):
            vendors[current].add(m.group(1))
        elif current:
            assert re.fullmatch(r"\t\t[0-9a-f]{4} [0-9a-f]{4}  \S.*", line), line
    for d in pci_devices(root).values():
        v, dev = read(d / "vendor")[2:], read(d / "device")[2:]
        if v == "1e52":
            assert v not in vendors  # the unknown-vendor accelerator stays unknown
            continue
        assert dev in vendors.get(v, set()), f"{v}:{dev} missing from pci.ids"


@pytest.mark.parametrize("name", ["edge-mixed", "intel-fpga-dfl"])
def test_builds_are_deterministic(tmp_path: Path, name: str) -> None:
    a = snapshot(profiles.build(name, tmp_path / "a"))
    b = snapshot(profiles.build(name, tmp_path / "b"))
    assert a == b


def test_large_profile_is_deterministic(built: dict[str, Path], tmp_path: Path) -> None:
    again = profiles.build("large-mixed", tmp_path / "again")
    assert snapshot(again) == snapshot(built["large-mixed"])


def test_seed_changes_identifiers_only(tmp_path: Path) -> None:
    a = snapshot(profiles.build("edge-mixed", tmp_path / "a", seed="one"))
    b = snapshot(profiles.build("edge-mixed", tmp_path / "b", seed="two"))
    assert a.keys() == b.keys()
    assert a != b
