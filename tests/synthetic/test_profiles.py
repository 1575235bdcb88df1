"""What each profile contains, checked against the layout contract."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from kubeacc.synthetic.__main__ import main

from .synth_helpers import by_id, pci_devices, read


def _nvml(root: Path) -> dict[str, object]:
    doc = json.loads((root / ".synthetic/nvml.json").read_text())
    assert isinstance(doc, dict)
    return doc


def test_dgx_h100_devices(built: dict[str, Path]) -> None:
    root = built["dgx-h100"]
    gpus = by_id(root, 0x10DE, 0x2330)
    nics = by_id(root, 0x15B3, 0x1021)
    vfs = by_id(root, 0x15B3, 0x101E)
    assert (len(gpus), len(nics), len(vfs)) == (8, 8, 64)
    assert Counter(read(g / "numa_node") for g in gpus) == {"0": 4, "1": 4}
    assert all(
        read(g / "class") == "0x030200" and g.joinpath("driver").resolve().name == "nvidia"
        for g in gpus
    )
    assert all(read(n / "sriov_totalvfs") == "16" and read(n / "sriov_numvfs") == "8" for n in nics)
    # GPUs and NICs share a switch: two of each behind every upstream port.
    by_switch = Counter(g.parent.parent.name for g in gpus + nics)
    assert sorted(by_switch.values()) == [4, 4, 4, 4]
    # the contract's example path
    assert (
        root
        / "sys/devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0/0000:3c:08.0/0000:3d:00.0"
        / "vendor"
    ).is_file()
    # distractors
    assert by_id(root, 0x1A03, 0x2000) and len(by_id(root, 0x144D, 0xA80A)) == 2
    assert by_id(root, 0x14E4, 0x165F)[0].joinpath("net/eno1").is_dir()
    assert len(by_id(root, 0x10DE, 0x22A3)) == 4  # NVSwitch: NVIDIA vendor, not a GPU
    assert read(root / "sys/bus/pci/devices/0000:00:00.0/class") == "0x060000"
    ib = sorted(p.name for p in (root / "sys/class/infiniband").iterdir())
    assert ib == [f"mlx5_{i}" for i in range(8)]
    assert read(root / "sys/class/infiniband/mlx5_0/ports/1/state") == "4: ACTIVE"
    assert len(list((root / "dev/infiniband").glob("uverbs*"))) == 8
    for node in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", *(f"nvidia{i}" for i in range(8))):
        assert (root / "dev" / node).is_file()


def test_dgx_proc_and_nvml_agree(built: dict[str, Path]) -> None:
    root = built["dgx-h100"]
    version = (root / "proc/driver/nvidia/version").read_text()
    assert re.match(r"NVRM version: NVIDIA UNIX x86_64 Kernel Module  550\.90\.07  ", version)
    doc = _nvml(root)
    assert doc["driverVersion"] == "550.90.07" and doc["cudaDriverVersion"] == 12040
    gpus = doc["gpus"]
    assert isinstance(gpus, list) and len(gpus) == 8
    bus_ids = {g["busId"] for g in gpus}
    for g in gpus:
        bdf = g["busId"][4:].lower()
        info = (root / "proc/driver/nvidia/gpus" / bdf / "information").read_text()
        assert f"GPU UUID: \t {g['uuid']}\n" in info
        assert f"Bus Location: \t {bdf}\n" in info
        assert f"Device Minor: \t {g['minorNumber']}\n" in info
        assert info.startswith("Model: \t\t NVIDIA H100 80GB HBM3\n")
        assert read(root / "sys/bus/pci/devices" / bdf / "numa_node") == str(g["numaNode"])
        links = g["nvlinks"]
        assert len(links) == 18 and [x["link"] for x in links] == list(range(18))
        peers = Counter(x["remoteBusId"] for x in links)
        assert len(peers) == 7 and set(peers.values()) == {2, 3}
        assert set(peers) <= bus_ids - {g["busId"]}
        for peer, n in peers.items():
            other = next(o for o in gpus if o["busId"] == peer)
            assert sum(1 for x in other["nvlinks"] if x["remoteBusId"] == g["busId"]) == n
    mig = [g for g in gpus if g["migMode"] == 1]
    assert len(mig) == 1 and len(mig[0]["migDevices"]) == 3
    assert all(m["uuid"].startswith("MIG-") for m in mig[0]["migDevices"])


def test_large_mixed_is_the_benchmark_node(built: dict[str, Path]) -> None:
    root = built["large-mixed"]
    assert len(by_id(root, 0x10DE, 0x2330)) == 8
    assert len(by_id(root, 0x15B3, 0x1021)) == 8
    assert len(by_id(root, 0x15B3, 0x101E)) == 64
    fpgas = by_id(root, 0x8086, 0x0B30) + by_id(root, 0x8086, 0x09C4)
    assert len(fpgas) == 2
    assert all(f.joinpath("driver").resolve().name == "dfl-pci" for f in fpgas)


def test_intel_fpga_dfl_layout(built: dict[str, Path]) -> None:
    root = built["intel-fpga-dfl"]
    regions = root / "sys/class/fpga_region"
    afus = []
    for k in range(2):
        card = regions / f"region{2 * k}"
        fme = card / f"dfl-fme.{k}"
        port = card / f"dfl-port.{k}"
        assert re.fullmatch(r"0x[0-9a-f]+", read(fme / "bitstream_id"))
        assert read(fme / "ports_num") == "1"
        compat = list(fme.glob("dfl-fme-region.*/fpga_region/region*/compat_id"))
        assert len(compat) == 1 and re.fullmatch(r"[0-9a-f]{32}", read(compat[0]))
        pr = regions / compat[0].parent.name
        assert pr.resolve() == compat[0].parent.resolve()
        afu = read(port / "afu_id")
        assert re.fullmatch(r"[0-9a-f]{32}", afu)
        afus.append(afu)
        assert (root / f"dev/dfl-fme.{k}").is_file() and (root / f"dev/dfl-port.{k}").is_file()
        pci = card.resolve().parent.parent
        assert pci.joinpath("driver").resolve().name == "dfl-pci"
        assert read(pci / "class") == "0x120000"
    assert afus[1] == "0" * 32 and afus[0] != "0" * 32
    numas = sorted(
        read(p / "numa_node") for p in pci_devices(root).values() if read(p / "class") == "0x120000"
    )
    assert numas == ["0", "1"]


def test_intel_fpga_opae_layout(built: dict[str, Path]) -> None:
    root = built["intel-fpga-opae"]
    devs = sorted((root / "sys/class/fpga").iterdir())
    assert [d.name for d in devs] == ["intel-fpga-dev.0", "intel-fpga-dev.1"]
    for n, d in enumerate(devs):
        assert re.fullmatch(r"[0-9a-f]{32}", read(d / f"intel-fpga-fme.{n}/pr/interface_id"))
        assert re.fullmatch(r"[0-9a-f]{32}", read(d / f"intel-fpga-port.{n}/afu_id"))
        assert read(d / f"intel-fpga-fme.{n}/bitstream_id").startswith("0x")
        assert d.resolve().parent.parent.joinpath("driver").resolve().name == "intel-fpga-pci"
        assert (root / f"dev/intel-fpga-fme.{n}").is_file()
        assert (root / f"dev/intel-fpga-port.{n}").is_file()


def test_aws_f1(built: dict[str, Path]) -> None:
    root = built["aws-f1"]
    assert len(by_id(root, 0x1D0F, 0xF000)) == 2 and len(by_id(root, 0x1D0F, 0xF001)) == 2
    (ena,) = by_id(root, 0x1D0F, 0xEC20)
    assert read(ena / "class") == "0x020000" and not (ena / "sriov_totalvfs").exists()
    assert (ena / "net").is_dir() and read(ena / "numa_node") == "-1"
    (nvme,) = by_id(root, 0x1D0F, 0x8061)
    assert read(nvme / "class") == "0x010802"
    assert not (root / "sys/kernel/iommu_groups").exists()
    assert read(root / "sys/devices/system/node/online") == "0"


def test_kunlun_xpu(built: dict[str, Path]) -> None:
    root = built["kunlun-xpu"]
    xpus = by_id(root, 0x1D22, 0x3684)
    assert len(xpus) == 8
    assert Counter(read(x / "numa_node") for x in xpus) == {"0": 4, "1": 4}
    assert all(x.joinpath("driver").resolve().name == "kunlun" for x in xpus)
    assert len(list((root / "dev").glob("xpu[0-9]*"))) == 8 and (root / "dev/xpuctrl").is_file()
    assert read(root / "sys/class/infiniband/mlx5_0/ports/1/link_layer") == "Ethernet"


def test_amd_gpu(built: dict[str, Path]) -> None:
    root = built["amd-gpu"]
    mi = by_id(root, 0x1002, 0x740F)
    assert len(mi) == 4 and len(by_id(root, 0x8086, 0x56C0)) == 1
    assert (root / "dev/kfd").is_file()
    for g in mi:
        render = [p.name for p in (g / "drm").iterdir() if p.name.startswith("renderD")]
        assert len(render) == 1 and (root / "dev/dri" / render[0]).is_file()
        assert int(read(g / "mem_info_vram_total")) == 68702699520
    props = sorted((root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties"))
    assert sum("drm_render_minor" in p.read_text() for p in props) == 4


def test_edge_mixed(built: dict[str, Path]) -> None:
    root = built["edge-mixed"]
    (l4,) = by_id(root, 0x10DE, 0x27B8)
    assert read(l4 / "class") == "0x030200"
    (e810,) = by_id(root, 0x8086, 0x1593)
    assert (read(e810 / "sriov_totalvfs"), read(e810 / "sriov_numvfs")) == ("8", "4")
    vfs = by_id(root, 0x8086, 0x1889)
    assert len(vfs) == 4 and all(v.joinpath("driver").resolve().name == "iavf" for v in vfs)
    assert all(len(list((v / "net").iterdir())) == 1 for v in vfs)
    (mgmt,) = by_id(root, 0x10EE, 0x5004)
    (user,) = by_id(root, 0x10EE, 0x5005)
    assert mgmt.parent == user.parent
    assert mgmt.joinpath("driver").resolve().name == "xclmgmt"
    assert user.joinpath("driver").resolve().name == "xocl"
    assert (root / "dev/xclmgmt768").is_file() and (user / "drm/renderD128").is_dir()
    (unknown,) = [p for p in pci_devices(root).values() if read(p / "vendor") == "0x1e52"]
    assert read(unknown / "class") == "0x120000"
    assert len(_nvml(root)["gpus"]) == 1  # type: ignore[arg-type]


def test_cli_lists_and_builds(tmp_path: Path, capsys: object) -> None:
    assert main(["--list"]) == 0
    assert main(["aws-f1", str(tmp_path / "h")]) == 0
    assert (tmp_path / "h/sys/bus/pci/devices").is_dir()
