"""What the CDI specs give the containers of AMD and Intel GPUs, KunLun XPUs and FPGAs: the
device nodes their user space opens (each a path of the host), and the host group of a node
restricted to one (docs/dra.md "Other vendors")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kubeacc.deviceplugin.cdi import build_spec as plugin_spec
from kubeacc.model import Device
from kubeacc.node.cdi import CDI_VERSION, CDIDevice, build_spec
from kubeacc.testbed.kubelet import make_device_nodes
from tests.hosts import HostFactory, discover

#: Per profile: (device type, vendor) -> the nodes each such device's container must get.
EXPECTED = {
    "amd-gpu": {("gpu", "AMD"): ("/dev/kfd", "/dev/dri/renderD", "/dev/dri/card")},
    "kunlun-xpu": {("xpu", "Baidu"): ("/dev/xpuctrl", "/dev/xpu")},
    "intel-fpga-dfl": {("fpga", "Intel"): ("/dev/dfl-fme.", "/dev/dfl-port.")},
    "intel-fpga-opae": {("fpga", "Intel"): ("/dev/intel-fpga-fme.", "/dev/intel-fpga-port.")},
}
RENDER_GID = 4242


def dra_spec(devs: list[Device], device_root: Path = Path("/")) -> dict[str, Any]:
    cdi = [CDIDevice(d.name, d.pci_bus_id or "", tuple(d.device_nodes)) for d in devs]
    return build_spec("uid-1", "ns/c", cdi, device_root)


def spec_nodes(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])]


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_each_vendors_spec_names_the_nodes_of_the_host(hosts: HostFactory, profile: str) -> None:
    host = hosts.copy(profile)
    devices = discover(host).devices
    for (kind, vendor), prefixes in EXPECTED[profile].items():
        mine = [d for d in devices if d.type.value == kind and d.vendor.startswith(vendor)]
        assert mine, (profile, kind, vendor)
        for spec in (dra_spec(mine), plugin_spec(mine)):
            for dev, entry in zip(mine, spec["devices"], strict=True):
                paths = [n["path"] for n in entry["containerEdits"]["deviceNodes"]]
                for prefix in prefixes:
                    assert any(p.startswith(prefix) for p in paths), (dev.name, prefix, paths)
                for p in paths:
                    assert (host / p.lstrip("/")).exists(), (profile, p)
            assert spec["cdiVersion"] == CDI_VERSION  # root-owned nodes: no group edits


def test_an_amd_gpus_render_group_reaches_the_container(hosts: HostFactory, tmp_path: Path) -> None:
    host = hosts.copy("amd-gpu")
    gpu = next(d for d in discover(host).devices if d.vendor == "AMD")
    root = tmp_path / "devices"
    made = make_device_nodes(root, gpu.device_nodes)
    for node in made:
        if "/dri/card" not in str(node):  # kfd and the render node: render group, 0660
            os.chown(node, 0, RENDER_GID)
            node.chmod(0o660)
    for spec in (dra_spec([gpu], root), plugin_spec([gpu], root)):
        nodes = {n["path"]: n for n in spec_nodes(spec)}
        render = next(p for p in nodes if p.startswith("/dev/dri/renderD"))
        card = next(p for p in nodes if p.startswith("/dev/dri/card"))
        assert nodes["/dev/kfd"]["gid"] == RENDER_GID
        assert nodes[render]["gid"] == RENDER_GID
        assert "gid" not in nodes[card]  # 0666, root's: open to all
        assert spec["cdiVersion"] == "0.7.0"
    edits = dra_spec([gpu], root)["containerEdits"]
    assert edits["additionalGids"] == [RENDER_GID]
    device_edits = plugin_spec([gpu], root)["devices"][0]["containerEdits"]
    assert device_edits["additionalGids"] == [RENDER_GID]
