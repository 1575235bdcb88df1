"""How a cordon shows: a NoSchedule taint in the slice (VFs too), Unhealthy in the device plugin."""

from __future__ import annotations

import pytest

from kubeacc.agent.cordons import CORDON_TAINT, with_cordon_taints, with_cordons_unhealthy
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
