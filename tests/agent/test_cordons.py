"""How a cordon shows: a NoSchedule taint in the slice (VFs too), Unhealthy in the device plugin."""

from __future__ import annotations

import pytest

from kubeacc.agent.cordons import (
    CORDON_TAINT,
    with_cordon_taints,
    with_cordons_unhealthy,
    with_unhealthy,
)
from kubeacc.agent.healthtaints import plugin_unhealthy
from kubeacc.model import HealthState, Inventory
from tests.hosts import HostFactory, discover


@pytest.fixture
def dgx(hosts: HostFactory) -> Inventory:
    return discover(hosts.pristine("dgx-h100"), nvml="off")


def test_cordon_taints_the_device_and_its_vfs_only() -> None:
    entries = [
        {"name": "nic-0000-2c-00-0"},
        {"name": "nic-0000-2c-00-0-vf1"},
        {"name": "gpu-0000-1b-00-0", "taints": [{"key": "kubeacc.io/unhealthy"}]},
        {"name": "gpu-0000-1c-00-0"},
    ]
    out = with_cordon_taints(entries, {"nic-0000-2c-00-0": "ns/drain", "gpu-0000-1b-00-0": ""})
    cordon = {"key": CORDON_TAINT, "effect": "NoSchedule"}
    assert out[0]["taints"] == [cordon]
    assert out[1]["taints"] == [cordon]
    assert out[2]["taints"] == [{"key": "kubeacc.io/unhealthy"}, cordon]
    assert "taints" not in out[3]
    assert "taints" not in entries[0], "the input is left alone"


def test_cordoned_devices_are_unhealthy_for_the_device_plugin(dgx: Inventory) -> None:
    gpu = dgx.devices[0]
    out = with_cordons_unhealthy(dgx, {gpu.name: "team/drain"})
    assert out.devices[0].health.state is HealthState.UNHEALTHY
    assert out.devices[0].health.reason == "cordoned by team/drain"
    assert all(d.health == o.health for d, o in zip(out.devices[1:], dgx.devices[1:], strict=True))
    assert with_cordons_unhealthy(dgx, {}) is dgx


def test_health_taints_that_keep_work_off_make_plugin_devices_unhealthy(dgx: Inventory) -> None:
    gpus = [d.name for d in dgx.devices if d.type.value == "gpu"][:3]
    taints = {
        gpus[0]: {"key": "kubeacc.io/health", "value": "xid-79", "effect": "NoExecute"},
        gpus[1]: {"key": "kubeacc.io/health", "value": "xid-94", "effect": "NoSchedule"},
        gpus[2]: {"key": "kubeacc.io/health", "value": "xid-92", "effect": "None"},
    }
    sick = plugin_unhealthy(taints)
    assert sick == {
        gpus[0]: "health taint xid-79 (NoExecute)",
        gpus[1]: "health taint xid-94 (NoSchedule)",
    }  # a degraded (None) device is still given out
    out = with_cordons_unhealthy(with_unhealthy(dgx, sick), {gpus[1]: "ns/drain"})
    health = {d.name: d.health for d in out.devices}
    assert health[gpus[0]].state is HealthState.UNHEALTHY
    assert health[gpus[0]].reason == "health taint xid-79 (NoExecute)"
    assert health[gpus[1]].reason == "cordoned by ns/drain"  # the cordon says it first
    assert health[gpus[2]].state is HealthState.HEALTHY
    assert with_unhealthy(dgx, {}) is dgx
