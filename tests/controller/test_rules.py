"""Policy -> DeviceClass and operation validation, as pure functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.controller.operations import TargetView, validate
from kubeacc.controller.policies import cel_selector, device_class
from kubeacc.crds.types import AcceleratorOperationSpec, AcceleratorPolicySpec, PolicySelector
from kubeacc.discovery import discover
from kubeacc.model import Device
from kubeacc.synthetic.profiles import build

SHA = "a" * 64


@pytest.fixture(scope="module")
def devices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Device]:
    root = build("edge-mixed", tmp_path_factory.mktemp("h") / "root")
    return {d.type.value: d for d in discover(Path(root)).devices}


def _view(dev: Device) -> TargetView:
    return TargetView.parse(
        {
            "metadata": {"name": f"n-{dev.name}"},
            "spec": {"node": "n", "deviceName": dev.name},
            "status": {"device": dev.model_dump(mode="json", by_alias=True)},
        }
    )


def test_cel_selector_quotes_values() -> None:
    sel = PolicySelector.model_validate({"types": ["gpu"], "models": ['L4 "v2"']})
    assert cel_selector(sel) == (
        'device.driver == "kubeacc.io" && device.attributes["kubeacc.io"].type in ["gpu"] && '
        'device.attributes["kubeacc.io"].model in ["L4 \\"v2\\""]'
    )


def test_device_class_name_and_owner() -> None:
    dc = device_class({"metadata": {"name": "p", "uid": "u"}, "spec": {}})
    assert dc["metadata"]["name"] == "p.policy.kubeacc.io"
    assert dc["metadata"]["ownerReferences"][0]["uid"] == "u"
    dc = device_class(
        {"metadata": {"name": "p", "uid": "u"}, "spec": {"deviceClass": {"name": "fast-gpus"}}}
    )
    assert dc["metadata"]["name"] == "fast-gpus"


def test_validate(devices: dict[str, Device]) -> None:
    fpga, gpu = devices["fpga"], devices["gpu"]
    pol = {
        "fpgas": AcceleratorPolicySpec.model_validate(
            {
                "selector": {"types": ["fpga"]},
                "allowedNamespaces": ["fpga-team"],
                "allowedBitstreams": [{"name": "a.gbs", "sha256": SHA}],
            }
        )
    }
    prog = AcceleratorOperationSpec.model_validate(
        {"action": "Program", "targets": ["t"], "program": {"bitstream": "a.gbs", "sha256": SHA}}
    )
    assert validate("fpga-team", prog, {"t": _view(fpga)}, pol) is None
    refusal = validate("other", prog, {"t": _view(fpga)}, pol)
    assert refusal and refusal.reason == "NamespaceNotAllowed"
    refusal = validate("fpga-team", prog, {"t": _view(gpu)}, pol)
    assert refusal and refusal.reason == "NotAnFPGA"
    refusal = validate("fpga-team", prog, {"t": None}, pol)
    assert refusal and refusal.reason == "AcceleratorNotFound"
    other = prog.model_copy(
        update={"program": prog.program.model_copy(update={"sha256": "b" * 64})}
    )  # type: ignore[union-attr]
    refusal = validate("fpga-team", other, {"t": _view(fpga)}, pol)
    assert refusal and refusal.reason == "BitstreamNotAllowed"
