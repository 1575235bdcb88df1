from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kubeacc.model import (
    SCHEMA_VERSION,
    Device,
    DeviceType,
    Inventory,
    Partition,
    PartitionKind,
    PCIIdentity,
    device_name,
)
from kubeacc.model.schema import SCHEMA_FILE, inventory_schema_json

REPO = Path(__file__).resolve().parents[2]


def _gpu(**extra: object) -> Device:
    return Device.model_validate(
        {
            "name": "gpu-0000-3b-00-0",
            "type": "gpu",
            "vendor": "NVIDIA",
            "model": "H100",
            "index": 0,
            "source": "test",
            "pci": {
                "busID": "0000:3B:00.0",
                "vendorId": "0x10de",
                "deviceId": "0x2330",
                "classId": "0x030200",
            },
            "pcieRoot": "pci0000:3a",
            **extra,
        }
    )


def test_json_round_trip_keeps_everything_and_uses_the_contract_keys() -> None:
    dev = _gpu(
        partitions=[
            {"kind": "sriov-vf", "index": 0, "name": "vf0", "busID": "0000:3b:00.2"},
            {"kind": "mig", "index": 0, "name": "mig0", "profile": "1g.10gb"},
        ]
    )
    doc = Inventory(devices=[dev]).to_json_dict()
    assert doc["schemaVersion"] == SCHEMA_VERSION
    out = doc["devices"][0]  # type: ignore[index]
    for key in ("name", "type", "vendor", "model", "pciBusID", "numaNode", "pcieRoot", "health"):
        assert key in out
    assert out["pciBusID"] == "0000:3b:00.0", "addresses are normalised to lower case"
    assert out["virtualFunctions"] == ["0000:3b:00.2"]
    again = Inventory.model_validate(json.loads(json.dumps(doc)))
    assert again.devices[0] == dev


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "GPU_0", "DNS label"),
        ("pcieRoot", "0000:3a", "pci0000:00"),
        ("type", "tpu", "gpu"),
        ("numaNode", -2, "greater than or equal"),
    ],
)
def test_invalid_values_are_rejected_with_a_clear_message(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _gpu(**{field: value})


def test_bad_pci_address_and_unknown_keys() -> None:
    with pytest.raises(ValidationError, match="not a PCI address"):
        PCIIdentity(bus_id="3b:00.0", vendor_id="0x10de", device_id="0x1", class_id="0x030200")
    with pytest.raises(ValidationError, match="Extra inputs"):
        _gpu(colour="green")


def test_device_name_is_stable_and_a_dns_label() -> None:
    assert device_name(DeviceType.NIC, "0000:3B:00.1") == "nic-0000-3b-00-1"
    part = Partition(kind=PartitionKind.MIG, index=1, name="x")
    assert part.bus_id is None


def test_published_schema_matches_the_model() -> None:
    committed = (REPO / SCHEMA_FILE).read_text()
    assert committed == inventory_schema_json(), (
        "the model changed: regenerate docs/schema with `kubeacc schema > " + SCHEMA_FILE + "`"
    )
