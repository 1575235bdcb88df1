from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from kubeacc.cli.main import app
from tests.hosts import HostFactory

runner = CliRunner()


def test_json_has_the_contract_shape(hosts: HostFactory) -> None:
    root = hosts.pristine("edge-mixed")
    result = runner.invoke(app, ["discover", "--host-root", str(root), "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert set(doc) >= {"devices", "warnings"}
    for dev in doc["devices"]:
        for key in ("name", "type", "vendor", "model", "pciBusID", "numaNode", "pcieRoot"):
            assert key in dev, key
        assert dev["health"]["state"] in ("Healthy", "Unhealthy", "Unknown")
    nic = next(d for d in doc["devices"] if d["type"] == "nic")
    assert len(nic["virtualFunctions"]) == 4


def test_yaml_and_type_filter(hosts: HostFactory) -> None:
    root = hosts.pristine("dgx-h100")
    result = runner.invoke(
        app, ["discover", "--host-root", str(root), "-o", "yaml", "--type", "gpu"]
    )
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.stdout)
    assert [d["type"] for d in doc["devices"]] == ["gpu"] * 8


def test_table_shows_devices_and_warnings(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    bdf = sorted((root / "proc/driver/nvidia/gpus").iterdir())[0].name
    (root / "sys/bus/pci/devices" / bdf / "numa_node").write_text("x\n")
    result = runner.invoke(app, ["discover", "--host-root", str(root)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "H100" in result.stdout and "pci0000:" in result.stdout
    assert "warning" in result.stderr and "numa_node" in result.stderr


def test_bad_host_root_and_bad_config_are_clear_errors(hosts: HostFactory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["discover", "--host-root", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "not a directory" in result.stderr
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("devices:\n  - vendor: nvidia\n    type: gpu\n")
    root = hosts.pristine("edge-mixed")
    result = runner.invoke(app, ["discover", "--host-root", str(root), "--config", str(cfg)])
    assert result.exit_code == 2
    assert "devices.0.vendor" in result.stderr and "hex PCI id" in result.stderr
