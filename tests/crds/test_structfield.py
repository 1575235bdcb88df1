"""The device model (msgspec) inside the pydantic CRD types: validated, dumped and described by
the model's own code."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubeacc.crds.manifests import model_schema
from kubeacc.crds.types import AcceleratorStatus
from kubeacc.model import Device, DeviceType, PCIIdentity


def _gpu() -> Device:
    pci = PCIIdentity(bus_id="0000:3B:00.0", vendor_id="0x10de", device_id="0x1", class_id="0x3")
    return Device(
        name="gpu-a", type=DeviceType.GPU, vendor="NVIDIA", model="L4", index=0, source="t", pci=pci
    )


def test_status_device_round_trips_through_the_model() -> None:
    status = AcceleratorStatus.model_validate({"device": _gpu().to_json_dict()})
    assert status.device == _gpu()
    assert status.to_api()["device"] == _gpu().to_json_dict()
    assert status.to_api()["device"]["pciBusID"] == "0000:3b:00.0"


def test_an_invalid_device_is_a_validation_error_naming_the_field() -> None:
    bad = {**_gpu().to_json_dict(), "numaNode": -5}
    with pytest.raises(ValidationError, match=r"numaNode"):
        AcceleratorStatus.model_validate({"device": bad})


def test_the_crd_schema_of_the_device_is_the_models() -> None:
    device = model_schema(AcceleratorStatus)["properties"]["device"]
    assert device["properties"]["numaNode"]["minimum"] == -1
    assert device["properties"]["type"] == {
        "type": "string",
        "enum": ["gpu", "fpga", "nic", "xpu", "accelerator"],
    }
    assert device["properties"]["pci"]["required"] == ["busID", "vendorId", "deviceId", "classId"]
    assert "pciBusID" not in device["required"]  # a device without a PCI address has none
