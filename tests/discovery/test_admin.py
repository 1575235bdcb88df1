from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.discovery import ConfigError, load_config
from kubeacc.model import DeviceType
from tests.hosts import HostFactory, discover


def test_admin_entry_claims_devices_before_built_in_backends(
    hosts: HostFactory, tmp_path: Path
) -> None:
    root = hosts.pristine("edge-mixed")
    unknown = next(d for d in discover(root).devices if d.type is DeviceType.ACCELERATOR)
    assert unknown.pci
    cfg = tmp_path / "devices.yaml"
    cfg.write_text(
        "apiVersion: kubeacc.io/v1alpha1\nkind: DiscoveryConfig\ndevices:\n"
        f'  - vendor: "{unknown.pci.vendor_id}"\n    type: xpu\n    model: Edge X1\n'
        '    deviceNodes: ["/dev/missing{index}"]\n'
    )
    inv = discover(root, config=load_config(cfg))
    xpu = inv.by_type(DeviceType.XPU)[0]
    assert xpu.pci_bus_id == unknown.pci_bus_id
    assert xpu.model == "Edge X1" and xpu.source == "admin"
    assert inv.by_type(DeviceType.ACCELERATOR) == []
    assert not xpu.health.healthy, "no driver is bound to it on this host"
    assert any(w.path == "/dev/missing0" and w.device == xpu.name for w in inv.warnings)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("devices: [{vendor: '0x10de', type: tpu}]", "devices.0.type"),
        ("devices: [{vendor: '0x10de', type: gpu, colour: red}]", "colour"),
        ("kind: Other", "kind"),
        ("- just a list", "mapping"),
        ("devices: [unclosed", "not valid YAML"),
    ],
)
def test_invalid_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config(cfg)
    assert str(cfg) in str(err.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")
