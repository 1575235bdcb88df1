"""Invalid custom resources are refused by the real API server, with messages that say why."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError, Client

from kubeacc.crds.resources import Accelerator, AcceleratorOperation, AcceleratorPolicy

SHA = "a" * 64


def _op(name: str, spec: dict[str, Any]) -> Any:
    return AcceleratorOperation(
        {"apiVersion": "kubeacc.io/v1alpha1", "kind": "AcceleratorOperation"},
        metadata={"name": name},
        spec=spec,
    )


def _refused(client: Client, obj: Any, namespace: str | None = None) -> str:
    with pytest.raises(ApiError) as err:
        client.create(obj, namespace=namespace) if namespace else client.create(obj)
    assert err.value.status.code == 422, err.value.status
    return str(err.value.status.message)


def test_operation_rules(kubeacc_crds: None, kube_client: Client, namespace: str) -> None:
    msg = _refused(
        kube_client, _op("no-program", {"action": "Program", "targets": ["a"]}), namespace
    )
    assert "spec.program is required for action Program" in msg
    msg = _refused(
        kube_client,
        _op(
            "bad-sha",
            {
                "action": "Program",
                "targets": ["a"],
                "program": {"bitstream": "x.gbs", "sha256": "xyz"},
            },
        ),
        namespace,
    )
    assert "spec.program.sha256" in msg
    msg = _refused(
        kube_client,
        _op(
            "escape",
            {
                "action": "Program",
                "targets": ["a"],
                "program": {"bitstream": "../etc/shadow", "sha256": SHA},
            },
        ),
        namespace,
    )
    assert "spec.program.bitstream" in msg
    msg = _refused(kube_client, _op("no-targets", {"action": "Reset", "targets": []}), namespace)
    assert "spec.targets" in msg
    msg = _refused(
        kube_client, _op("bad-action", {"action": "Explode", "targets": ["a"]}), namespace
    )
    assert "Unsupported value" in msg and "Explode" in msg
    msg = _refused(
        kube_client,
        _op("power-missing", {"action": "Power", "targets": ["a"]}),
        namespace,
    )
    assert "spec.power is required for action Power" in msg

    ok = _op("reset-ok", {"action": "Reset", "targets": ["node-a-gpu-0000-01-00-0"]})
    kube_client.create(ok, namespace=namespace)
    with pytest.raises(ApiError) as err:
        kube_client.patch(
            AcceleratorOperation,
            "reset-ok",
            {"spec": {"action": "Attach"}},
            namespace=namespace,
            patch_type=__import__("lightkube").types.PatchType.MERGE,
        )
    assert "spec is immutable" in str(err.value.status.message)


def test_accelerator_and_policy_rules(kubeacc_crds: None, kube_client: Client) -> None:
    acc = Accelerator(
        {"apiVersion": "kubeacc.io/v1alpha1", "kind": "Accelerator"},
        metadata={"name": "wrong-name"},
        spec={"node": "node-x", "deviceName": "gpu-0000-01-00-0"},
    )
    msg = _refused(kube_client, acc)
    assert "metadata.name must be <spec.node>-<spec.deviceName>" in msg

    pol = AcceleratorPolicy(
        {"apiVersion": "kubeacc.io/v1alpha1", "kind": "AcceleratorPolicy"},
        metadata={"name": "bad-sharing"},
        spec={"selector": {"types": ["gpu"]}, "sharing": {"mode": "Exclusive", "maxConsumers": 4}},
    )
    assert "Exclusive sharing allows exactly one consumer" in _refused(kube_client, pol)
    pol = AcceleratorPolicy(
        {"apiVersion": "kubeacc.io/v1alpha1", "kind": "AcceleratorPolicy"},
        metadata={"name": "bitstreams-on-gpus"},
        spec={
            "selector": {"types": ["gpu"]},
            "allowedBitstreams": [{"name": "a.gbs", "sha256": SHA}],
        },
    )
    assert "allowedBitstreams only make sense" in _refused(kube_client, pol)
    pol = AcceleratorPolicy(
        {"apiVersion": "kubeacc.io/v1alpha1", "kind": "AcceleratorPolicy"},
        metadata={"name": "bad-type"},
        spec={"selector": {"types": ["quantum"]}},
    )
    assert "spec.selector.types" in _refused(kube_client, pol)


def _policy(name: str, spec: dict[str, Any]) -> Any:
    return AcceleratorPolicy(
        {"apiVersion": "kubeacc.io/v1alpha1", "kind": "AcceleratorPolicy"},
        metadata={"name": name},
        spec=spec,
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"sharing": {"mode": "MPS"}}, "sharing mode MPS needs a selector of types [gpu] alone"),
        (
            {"selector": {"types": ["gpu", "xpu"]}, "sharing": {"mode": "MPS"}},
            "sharing mode MPS needs a selector of types [gpu] alone",
        ),
        (
            {
                "selector": {"types": ["gpu"]},
                "sharing": {"mode": "MemoryShared", "timeSlice": "Short"},
            },
            "timeSlice is only valid with mode TimeSliced",
        ),
        (
            {
                "selector": {"types": ["fpga"]},
                "sharing": {"mode": "TimeSliced", "timeSlice": "Long"},
            },
            "sharing.timeSlice needs a selector of types [gpu] alone",
        ),
        ({"selector": {"types": ["gpu"]}, "sharing": {"mode": "Spatial"}}, "spec.sharing.mode"),
        (
            {
                "selector": {"types": ["gpu"]},
                "sharing": {"mode": "TimeSliced", "timeSlice": "Tiny"},
            },
            "spec.sharing.timeSlice",
        ),
        (
            {
                "selector": {"types": ["fpga"]},
                "sharing": {"mode": "MIG", "migProfiles": ["3g.40gb"]},
            },
            "sharing mode MIG needs a selector of types [gpu] alone",
        ),
        (
            {"sharing": {"mode": "MIG", "migProfiles": ["3g.40gb"]}},
            "sharing mode MIG needs a selector of types [gpu] alone",
        ),
        (
            {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MIG"}},
            "mode MIG needs a non-empty migProfiles",
        ),
        (
            {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MIG", "migProfiles": []}},
            "mode MIG needs a non-empty migProfiles",
        ),
        (
            {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MIG", "migProfiles": ["3g"]}},
            "spec.sharing.migProfiles[0]",
        ),
        (
            {
                "selector": {"types": ["gpu"]},
                "sharing": {"mode": "MIG", "migProfiles": ["1g.10gb", "1g.10gb+me"]},
            },
            "spec.sharing.migProfiles[1]",
        ),
        (
            {
                "selector": {"types": ["gpu"]},
                "sharing": {"mode": "MPS", "migProfiles": ["3g.40gb"]},
            },
            "migProfiles is only valid with it",
        ),
        (
            {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MPS", "migWholeGpu": False}},
            "migWholeGpu is only valid with mode MIG",
        ),
    ],
)
def test_sharing_mode_rules(
    kubeacc_crds: None, kube_client: Client, spec: dict[str, Any], message: str
) -> None:
    assert message in _refused(kube_client, _policy("bad-sharing-mode", spec))


def test_gpu_sharing_modes_are_accepted(kubeacc_crds: None, kube_client: Client) -> None:
    for name, sharing in (
        ("mps-gpus", {"mode": "MPS"}),
        ("sliced-gpus", {"mode": "TimeSliced", "timeSlice": "Medium"}),
        ("mig-gpus", {"mode": "MIG", "migProfiles": ["3g.40gb", "1g.10gb"]}),
        ("mig-parts", {"mode": "MIG", "migProfiles": ["7g.80gb"], "migWholeGpu": False}),
    ):
        kube_client.create(_policy(name, {"selector": {"types": ["gpu"]}, "sharing": sharing}))
        kube_client.delete(AcceleratorPolicy, name)


def test_operation_target_selector_rules(
    kubeacc_crds: None, kube_client: Client, namespace: str
) -> None:
    selector = {"matchLabels": {"kubeacc.io/type": "gpu"}}
    msg = _refused(kube_client, _op("no-target", {"action": "Reset"}), namespace)
    assert "exactly one of spec.targets and spec.targetSelector is required" in msg
    both = {"action": "Reset", "targets": ["a"], "targetSelector": selector}
    msg = _refused(kube_client, _op("both", both), namespace)
    assert "exactly one of spec.targets and spec.targetSelector is required" in msg
    for bad, field in [
        ({"matchLabels": {}}, "spec.targetSelector.matchLabels"),
        ({**selector, "maxTargets": 0}, "spec.targetSelector.maxTargets"),
        ({**selector, "maxTargets": 65}, "spec.targetSelector.maxTargets"),
        ({"matchLabels": {"kubeacc.io/model": "NVIDIA H100"}}, "spec.targetSelector.matchLabels"),
        ({"maxTargets": 2}, "spec.targetSelector.matchLabels"),
    ]:
        msg = _refused(
            kube_client, _op("bad-selector", {"action": "Reset", "targetSelector": bad}), namespace
        )
        assert field in msg, (bad, msg)
    ok = _op("by-label", {"action": "Reset", "targetSelector": {**selector, "maxTargets": 64}})
    kube_client.create(ok, namespace=namespace)
    got = kube_client.get(AcceleratorOperation, "by-label", namespace=namespace)
    assert got.spec is not None and got.spec["targetSelector"]["maxTargets"] == 64
