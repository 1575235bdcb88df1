"""status.devices entries of a prepared claim (dra/devicestatus.py)."""

from __future__ import annotations

from kubeacc.agent.dra.checkpoint import PreparedDevice
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.devicestatus import device_entries
from kubeacc.model import HealthState


def info(name: str, **kw: str) -> DeviceInfo:
    return DeviceInfo(name, "gpu", kw.pop("bus_id", ""), (), HealthState.HEALTHY, "", **kw)


def test_each_device_once_with_what_is_known_of_it() -> None:
    infos = {
        "gpu-a": info("gpu-a", bus_id="0000:1b:00.0", uuid="GPU-1234"),
        "nic-b-vf1": info("nic-b-vf1", bus_id="0000:5e:00.2", netdev="ens1f0v1"),
    }
    prepared = [
        PreparedDevice(["r1"], "node-a", "gpu-a", [], share_id="s1"),
        PreparedDevice(["r2"], "node-a", "gpu-a", [], share_id="s2"),  # a second share
        PreparedDevice(["nic"], "node-a", "nic-b-vf1", []),
        PreparedDevice(["x"], "", "gone", []),  # no longer in the index: entry without data
    ]
    out = device_entries("node-a", prepared, infos)
    assert [(e["device"], e["pool"]) for e in out] == [
        ("gpu-a", "node-a"),
        ("nic-b-vf1", "node-a"),
        ("gone", "node-a"),
    ]
    assert out[0]["data"] == {"pciBusID": "0000:1b:00.0", "uuid": "GPU-1234"}
    assert "networkData" not in out[0]
    assert out[1]["networkData"] == {"interfaceName": "ens1f0v1"}
    assert "data" in out[1] and "data" not in out[2]
    for e in out:
        assert e["driver"] == "kubeacc.io"
        [c] = e["conditions"]
        assert (c["type"], c["status"], c["reason"]) == ("Ready", "True", "Prepared")
