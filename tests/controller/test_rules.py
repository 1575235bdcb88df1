"""Policy -> DeviceClass and operation validation, as pure functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from kubeacc.controller.operations import (
    TargetView,
    attributable_results,
    choose_targets,
    claim_holders,
    validate,
)
from kubeacc.controller.policies import cel_selector, device_class
from kubeacc.crds.controlread import operation_spec, operation_status, policy_spec
from kubeacc.model import Device
from kubeacc.synthetic.profiles import build
from tests.hosts import discover

SHA = "a" * 64


@pytest.fixture(scope="module")
def devices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Device]:
    root = build("edge-mixed", tmp_path_factory.mktemp("h") / "root")
    return {d.type.value: d for d in discover(Path(root)).devices}


def _view(dev: Device, node: str = "n", *, reported: bool = True) -> TargetView:
    status = {"device": dev.to_json_dict()} if reported else {}
    return TargetView.parse(
        {
            "metadata": {"name": f"{node}-{dev.name}"},
            "spec": {"node": node, "deviceName": dev.name},
            "status": status,
        }
    )


def test_a_selector_prefers_granted_reported_idle_devices_then_names(
    devices: dict[str, Device],
) -> None:
    gpu, fpga = devices["gpu"], devices["fpga"]
    views = [_view(gpu, n) for n in ("d", "c", "b")] + [_view(gpu, "a", reported=False)]
    names = [v.name for v in views]
    # admins: reported before unreported, idle before busy, then name order
    assert choose_targets("ns", views, {names[2]}, 4, {}) == [names[1], names[0], *names[2:]]
    assert choose_targets("ns", views, set(), 2, {}) == [names[2], names[1]]
    # a tenant: devices a policy grants its namespace come first
    grant = policy_spec(
        {"spec": {"selector": {"types": ["fpga"]}, "allowedNamespaces": ["team-a"]}}
    )
    mixed = [*views, _view(fpga, "z")]
    chosen = choose_targets("team-a", mixed, set(), 1, {"fpgas": grant}, ("kube-system",))
    assert chosen == [f"z-{fpga.name}"]
    # none granted: the choice is made anyway, and validate refuses it as for a named target
    (name,) = choose_targets("team-b", mixed, set(), 1, {"fpgas": grant}, ("kube-system",))
    reset = operation_spec({"spec": {"action": "Reset", "targets": [name]}})
    view = next(v for v in mixed if v.name == name)
    refusal = validate("team-b", reset, {name: view}, {"fpgas": grant}, ("kube-system",))
    assert refusal and refusal.reason == "NamespaceNotAllowed"


def test_cel_selector_quotes_values() -> None:
    sel = policy_spec({"spec": {"selector": {"types": ["gpu"], "models": ['L4 "v2"']}}}).selector
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
        "fpgas": policy_spec(
            {
                "spec": {
                    "selector": {"types": ["fpga"]},
                    "allowedNamespaces": ["fpga-team"],
                    "allowedBitstreams": [{"name": "a.gbs", "sha256": SHA}],
                }
            }
        )
    }
    prog = operation_spec(
        {
            "spec": {
                "action": "Program",
                "targets": ["t"],
                "program": {"bitstream": "a.gbs", "sha256": SHA},
            }
        }
    )
    assert validate("fpga-team", prog, {"t": _view(fpga)}, pol, ()) is None
    refusal = validate("other", prog, {"t": _view(fpga)}, pol, ())
    assert refusal and refusal.reason == "NamespaceNotAllowed"
    refusal = validate("fpga-team", prog, {"t": _view(gpu)}, pol)
    assert refusal and refusal.reason == "NotAnFPGA"
    refusal = validate("fpga-team", prog, {"t": None}, pol)
    assert refusal and refusal.reason == "AcceleratorNotFound"
    other = msgspec.structs.replace(
        prog, program=msgspec.structs.replace(prog.program, sha256="b" * 64)
    )
    refusal = validate("fpga-team", other, {"t": _view(fpga)}, pol)
    assert refusal and refusal.reason == "BitstreamNotAllowed"


def test_an_fpga_without_a_pci_function_may_be_programmed_not_reset(
    devices: dict[str, Device],
) -> None:
    """An FPGA as OpenStack Cyborg reports it: its FIM and AFU, no PCI function."""
    fpga = msgspec.structs.replace(devices["fpga"], pci=None)
    pol = {
        "fpgas": policy_spec(
            {
                "spec": {
                    "selector": {"types": ["fpga"]},
                    "allowedBitstreams": [{"name": "a.gbs", "sha256": SHA}],
                }
            }
        )
    }
    program = {"bitstream": "a.gbs", "sha256": SHA}
    prog = operation_spec({"spec": {"action": "Program", "targets": ["t"], "program": program}})
    assert validate("ns", prog, {"t": _view(fpga)}, pol) is None
    reset = operation_spec({"spec": {"action": "Reset", "targets": ["t"]}})
    refusal = validate("ns", reset, {"t": _view(fpga)}, pol)
    assert refusal and refusal.reason == "NotAPCIDevice"


def test_operations_need_a_grant_outside_the_admin_namespaces(devices: dict[str, Device]) -> None:
    gpu = {"t": _view(devices["gpu"])}
    reset = operation_spec({"spec": {"action": "Reset", "targets": ["t"]}})
    admins = ("kube-system",)
    # no policy: only the admins' namespace
    assert validate("kube-system", reset, gpu, {}, admins) is None
    refusal = validate("team-a", reset, gpu, {}, admins)
    assert refusal and refusal.reason == "NamespaceNotAllowed"
    assert "no AcceleratorPolicy covering it grants namespace team-a" in refusal.message
    # a policy with no namespaces grants nothing; one listing team-a grants team-a only
    empty = policy_spec({"spec": {"selector": {"types": ["gpu"]}}})
    refusal = validate("team-a", reset, gpu, {"all-gpus": empty}, admins)
    assert refusal and "none of the AcceleratorPolicies covering it (all-gpus)" in refusal.message
    grant = policy_spec({"spec": {"selector": {"types": ["gpu"]}, "allowedNamespaces": ["team-a"]}})
    policies = {"all-gpus": empty, "team-a-gpus": grant}
    assert validate("team-a", reset, gpu, policies, admins) is None
    assert validate("team-b", reset, gpu, policies, admins) is not None
    # a grant for FPGAs is no grant for GPUs
    fpgas = policy_spec(
        {"spec": {"selector": {"types": ["fpga"]}, "allowedNamespaces": ["team-b"]}}
    )
    assert validate("team-b", reset, gpu, {"fpgas": fpgas}, admins) is not None


def test_only_results_of_the_dispatched_node_count() -> None:
    status = operation_status(
        {
            "status": {
                "phase": "Running",
                "dispatch": [
                    {"accelerator": "b-gpu", "node": "b", "deviceName": "gpu"},
                    {"accelerator": "c-gpu", "node": "c", "deviceName": "gpu"},
                ],
                "results": [
                    {"accelerator": "b-gpu", "node": "b", "phase": "Succeeded"},
                    # node b's agent reporting node c's target, and a target never dispatched
                    {"accelerator": "c-gpu", "node": "b", "phase": "Succeeded"},
                    {"accelerator": "d-gpu", "node": "d", "phase": "Failed"},
                ],
            }
        }
    )
    assert list(attributable_results(status)) == ["b-gpu"]


def test_claim_holders_are_reserved_claims_on_the_target(devices: dict[str, Device]) -> None:
    dev = next(iter(devices.values()))
    acc = {
        "metadata": {"name": f"node-a-{dev.name}"},
        "spec": {"node": "node-a", "deviceName": dev.name},
        "status": {"device": dev.to_json_dict()},
    }
    targets = {acc["metadata"]["name"]: TargetView.parse(acc)}

    def claim(name: str, device: str, reserved: bool, pool: str = "node-a") -> dict[str, Any]:
        result = {"driver": "kubeacc.io", "pool": pool, "device": device, "request": "r"}
        status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
        if reserved:
            status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "1"}]
        return {"metadata": {"namespace": "ns", "name": name}, "status": status}

    claims = [
        claim("held", dev.name, True),
        claim("vf", f"{dev.name}-vf2", True),
        claim("done", dev.name, False),  # allocated, no longer reserved
        claim("elsewhere", dev.name, True, pool="node-b"),
    ]
    held = claim_holders(claims, targets, "kubeacc.io")
    assert held == {acc["metadata"]["name"]: "ResourceClaim ns/held, ResourceClaim ns/vf"}
