from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubeacc.model import (
    SCHEMA_VERSION,
    SRIOV,
    Device,
    DeviceType,
    Inventory,
    ModelError,
    Partition,
    PartitionKind,
    PCIIdentity,
    device_name,
)
from kubeacc.model.schema import SCHEMA_FILE, inventory_schema_json

REPO = Path(__file__).resolve().parents[2]


def _gpu(**extra: object) -> Device:
    return Device.from_json_dict(
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
    again = Inventory.from_json_dict(json.loads(json.dumps(doc)))
    assert again.devices[0] == dev


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "GPU_0", "DNS label"),
        ("pcieRoot", "0000:3a", "pci0000:00"),
        ("type", "tpu", "Invalid enum value 'tpu' - at `\\$.type`"),
        ("numaNode", -2, "numaNode"),
        ("numaNode", -2, ">= -1"),
    ],
)
def test_invalid_values_are_rejected_with_a_clear_message(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        _gpu(**{field: value})


def test_bad_pci_address_and_unknown_keys() -> None:
    with pytest.raises(ModelError, match="not a PCI address"):
        PCIIdentity(bus_id="3b:00.0", vendor_id="0x10de", device_id="0x1", class_id="0x030200")
    with pytest.raises(ModelError, match="unknown field `colour`"):
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


def test_construction_validates_like_decoding() -> None:
    """msgspec checks only on decoding; the model's own checks run on construction too."""
    with pytest.raises(ModelError, match="DNS label"):
        _gpu().replace(name="GPU_0")
    with pytest.raises(ModelError, match=r"numaNode: -2 is not >= -1"):
        _gpu().replace(numa_node=-2)
    with pytest.raises(ModelError, match="type: 'tpu' is not one of"):
        _gpu().replace(type="tpu")
    assert _gpu().replace(type="nic").type is DeviceType.NIC  # strings become the enum
    with pytest.raises(ModelError, match="totalVFs"):
        SRIOV(total_vfs=-1, num_vfs=0)


def test_derived_keys_are_written_and_read_back_but_not_stored() -> None:
    out = _gpu().to_json_dict()
    assert out["pciBusID"] == "0000:3b:00.0"
    assert "uuid" not in out, "None values are left out"
    assert Device.from_json_dict({**out, "pciBusID": "ignored"}) == _gpu()
    with pytest.raises(ModelError, match="expected an object"):
        Device.from_json_dict(["not", "a", "device"])  # type: ignore[arg-type]


def test_snake_case_keys_are_python_names_not_json_keys() -> None:
    """JSON in is camelCase only (what the API server and our own output carry)."""
    with pytest.raises(ModelError, match="unknown field `numa_node`"):
        _gpu(numa_node=0)
