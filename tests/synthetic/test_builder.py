"""HostBuilder on its own: small custom hosts and the errors it refuses to write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubeacc.synthetic.pci import Bdf
from kubeacc.synthetic.system import format_cpulist, format_cpumask, parse_cpulist
from kubeacc.synthetic.tree import HostBuilder


def _small(tmp_path: Path) -> HostBuilder:
    b = HostBuilder(tmp_path)
    b.numa(["0-3", "4-7"], [[10, 21], [21, 10]])
    root = b.root_complex(0, 0x3A, numa=1)
    port = b.bridge(root, "0000:3a:02.0", 0x8086, 0x352A)
    b.function(port, "0000:3b:00.0", 0x10DE, 0x2330, 0x030200, "nvidia")
    return b


def test_custom_host(tmp_path: Path) -> None:
    b = _small(tmp_path)
    gpu = tmp_path / "sys/devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0"
    assert (gpu / "numa_node").read_text() == "1\n"
    assert (gpu / "local_cpulist").read_text() == "4-7\n"
    assert (gpu / "local_cpus").read_text() == "f0\n"
    assert os.readlink(tmp_path / "sys/bus/pci/devices/0000:3b:00.0") == (
        "../../../devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0"
    )
    assert os.readlink(gpu / "driver") == "../../../../bus/pci/drivers/nvidia"
    b.unbind("0000:3b:00.0")
    assert not (gpu / "driver").exists()
    assert not (tmp_path / "sys/bus/pci/drivers/nvidia/0000:3b:00.0").exists()
    b.bind("0000:3b:00.0", "vfio-pci")
    assert (gpu / "driver").resolve().name == "vfio-pci"
    assert "DRIVER=vfio-pci" in (gpu / "uevent").read_text()


def test_refuses_inconsistent_topology(tmp_path: Path) -> None:
    b = _small(tmp_path)
    port = b.get("0000:3a:02.0")
    with pytest.raises(ValueError, match="not on bus"):
        b.function(port, "0000:3c:00.0", 0x10DE, 0x2330, 0x030200)
    with pytest.raises(ValueError, match="already exists"):
        b.function(port, "0000:3b:00.0", 0x10DE, 0x2330, 0x030200)
    with pytest.raises(ValueError, match="not a bridge"):
        b.function("0000:3b:00.0", "0000:3c:00.0", 0x10DE, 0x2330, 0x030200)
    with pytest.raises(ValueError, match="PCI address"):
        b.function(port, "3b:00.0", 0x10DE, 0x2330, 0x030200)
    with pytest.raises(RuntimeError):
        b.numa(["0-1"], [[10]])


def test_sriov_and_explicit_iommu_group(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path)
    root = b.root_complex(0, 0x00, numa=0)
    port = b.bridge(root, "0000:00:01.0", 0x8086, 0x352A)
    b.function(port, "0000:01:00.0", 0x15B3, 0x1021, 0x020000, "mlx5_core", iommu_group=7)
    vfs = b.sriov("0000:01:00.0", 4, 2, 0x101E, "mlx5_core", offset=2)
    assert vfs == ["0000:01:00.2", "0000:01:00.3"]
    pf = b.path("/sys/bus/pci/devices/0000:01:00.0").resolve()
    assert os.readlink(pf / "virtfn0") == "../0000:01:00.2"
    assert os.readlink(pf.parent / "0000:01:00.3/physfn") == "../0000:01:00.0"
    assert (pf / "sriov_vf_device").read_text() == "101e\n"
    assert (pf / "iommu_group").resolve().name == "7"
    group = tmp_path / "sys/kernel/iommu_groups/7/devices/0000:01:00.0"
    assert group.resolve() == pf


def test_no_iommu_and_default_numa(tmp_path: Path) -> None:
    b = HostBuilder(tmp_path, iommu=False)
    root = b.root_complex(0, 0x00)
    fn = b.function(root, "0000:00:04.0", 0x1D0F, 0x8061, 0x010802, "nvme")
    assert not (fn / "iommu_group").exists()
    assert (fn / "numa_node").read_text() == "-1\n"
    assert (fn / "local_cpulist").read_text() == "0-7\n"


def test_cpu_formats() -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([3, 1, 2, 0, 8]) == "0-3,8"
    assert format_cpumask([0, 1, 2, 3], 8) == "0f"
    assert format_cpumask([32], 40) == "01,00000000"
    assert format_cpumask(range(64), 64) == "ffffffff,ffffffff"


def test_bdf_forms() -> None:
    a = Bdf.parse("0000:3d:00.1")
    assert str(a) == "0000:3d:00.1" and a.nvml() == "00000000:3D:00.1"
    assert Bdf.from_rid(0, a.rid + 1) == Bdf.parse("0000:3d:00.2")
    assert Bdf.from_rid(0, Bdf.parse("0000:3d:00.7").rid + 1) == Bdf.parse("0000:3d:01.0")
