"""status.devices entries of a prepared claim (dra/devicestatus.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubeacc.agent.dra.checkpoint import PreparedDevice
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.devicestatus import device_entries
from kubeacc.agent.dra.mig.model import Partition
from kubeacc.model import HealthState


def info(name: str, **kw: str) -> DeviceInfo:
    return DeviceInfo(name, "gpu", kw.pop("bus_id", ""), (), HealthState.HEALTHY, "", **kw)


def test_each_device_or_share_once_with_what_is_known_of_it() -> None:
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
    # one entry per share: the API server takes an entry only as allocated (device + shareID)
    assert [(e["device"], e["pool"], e.get("shareID")) for e in out] == [
        ("gpu-a", "node-a", "s1"),
        ("gpu-a", "node-a", "s2"),
        ("nic-b-vf1", "node-a", None),
        ("gone", "node-a", None),
    ]
    assert out[0]["data"] == out[1]["data"] == {"pciBusID": "0000:1b:00.0", "uuid": "GPU-1234"}
    assert "networkData" not in out[0]
    assert out[2]["networkData"] == {"interfaceName": "ens1f0v1"}
    assert "data" in out[2] and "data" not in out[3]
    for e in out:
        assert e["driver"] == "kubeacc.io"
        [c] = e["conditions"]
        assert (c["type"], c["status"], c["reason"]) == ("Ready", "True", "Prepared")


def _partition(**kw: object) -> Partition:
    base: dict[str, object] = {
        "gpu_bus_id": "0000:1b:00.0",
        "gpu_uuid": "GPU-1234",
        "gpu_minor": 0,
        "profile": "1g.10gb",
        "profile_id": 19,
        "slices": 1,
        "start": 2,
        "size": 1,
    }
    return Partition(**{**base, **kw})  # type: ignore[arg-type]


def test_mig_partition_carries_its_instance_uuid_and_its_gpu() -> None:
    made = info("gpu-a-mig-1g-10gb-2", bus_id="0000:1b:00.0")
    fixed = info("gpu-a-mig-1g-10gb-4", bus_id="0000:1b:00.0")
    infos = {
        made.name: replace(made, mig=_partition()),
        fixed.name: replace(fixed, mig=_partition(start=4, fixed_gi=5, fixed_uuid="MIG-fixed")),
    }
    prepared = [PreparedDevice(["p"], "node-a", n, []) for n in infos]
    out = device_entries("node-a", prepared, infos, {made.name: "MIG-made"})
    assert [e["data"] for e in out] == [
        {"pciBusID": "0000:1b:00.0", "uuid": "MIG-made", "parentUUID": "GPU-1234",
         "migProfile": "1g.10gb"},
        {"pciBusID": "0000:1b:00.0", "uuid": "MIG-fixed", "parentUUID": "GPU-1234",
         "migProfile": "1g.10gb"},
    ]  # fmt: skip


def test_network_data_of_a_whole_nic_with_ips_of_a_vf_without() -> None:
    infos = {
        "nic-a": info("nic-a", netdev="ens1f0"),
        "nic-a-vf0": replace(info("nic-a-vf0", netdev="ens1f0v0"), vf=True),
    }
    asked: list[tuple[str, bool]] = []

    def read(ifname: str, with_ips: bool) -> dict[str, Any]:
        asked.append((ifname, with_ips))
        return {"interfaceName": ifname, "hardwareAddress": "0c:42:a1:00:00:01"}

    prepared = [PreparedDevice(["n"], "node-a", n, []) for n in infos]
    out = device_entries("node-a", prepared, infos, network=read)
    assert asked == [("ens1f0", True), ("ens1f0v0", False)]
    assert out[0]["networkData"]["hardwareAddress"] == "0c:42:a1:00:00:01"


def test_this_nodes_entries_are_replaced_and_other_writers_conditions_kept() -> None:
    from kubeacc.agent.dra.devicestatus import with_node_entries

    bound = {"type": "kubeacc.io/BitstreamProgrammed", "status": "True"}
    ready = {"type": "Ready", "status": "True"}
    entries = [
        {"driver": "kubeacc.io", "pool": "a", "device": "fpga-0", "conditions": [bound]},
        {"driver": "kubeacc.io", "pool": "a", "device": "gone", "conditions": [ready]},
        {"driver": "kubeacc.io", "pool": "b", "device": "x", "conditions": [ready]},
        {"driver": "gpu.example.com", "pool": "a", "device": "y"},
    ]
    ours = [
        {"driver": "kubeacc.io", "pool": "a", "device": "fpga-0", "conditions": [ready]},
        {"driver": "kubeacc.io", "pool": "a", "device": "new", "conditions": [ready]},
    ]
    got = with_node_entries(entries, "a", ours)
    assert got == [
        {"driver": "kubeacc.io", "pool": "a", "device": "fpga-0", "conditions": [bound, ready]},
        entries[2],
        entries[3],
        ours[1],
    ]
    assert with_node_entries(got, "a", []) == [entries[2], entries[3]]  # unprepare


def test_a_condition_whose_status_stays_keeps_its_transition_time() -> None:
    from kubeacc.agent.dra.devicestatus import with_node_entries

    def ready(status: str, since: str) -> dict[str, Any]:
        return {"type": "Ready", "status": status, "lastTransitionTime": since}

    def entry(*conditions: dict[str, Any]) -> dict[str, Any]:
        return {"driver": "kubeacc.io", "pool": "a", "device": "gpu-0", "conditions": [*conditions]}

    on_server = [entry(ready("True", "2026-11-27T10:00:00Z"))]
    # prepared again later: still Ready, so the entry is what the server has (nothing to send)
    again = with_node_entries(on_server, "a", [entry(ready("True", "2026-11-27T11:00:00Z"))])
    assert again == on_server
    # a status that changes takes the new time
    down = with_node_entries(on_server, "a", [entry(ready("False", "2026-11-27T11:00:00Z"))])
    assert down == [entry(ready("False", "2026-11-27T11:00:00Z"))]
