"""Inventory devices as slice entries: names, attributes, capacity, VFs, taints."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from kubeacc.agent.dra.devices import (
    NUMA_NODE_ATTR,
    PCI_BUS_ID_ATTR,
    PCIE_ROOT_ATTR,
    SMALL_DOMAIN,
    UNHEALTHY_TAINT,
    device_index,
    slice_devices,
)
from kubeacc.model import Health, HealthState, Inventory, PartitionKind
from kubeacc.synthetic import profiles

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def test_gpu_attributes_and_memory_capacity(dgx: Inventory) -> None:
    devs = {d["name"]: d for d in slice_devices(dgx)}
    gpu = devs["gpu-0000-1b-00-0"]
    a = gpu["attributes"]
    assert a["type"] == {"string": "gpu"}
    assert a["vendor"] == {"string": "NVIDIA"}
    assert a["model"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert a["index"] == {"int": 0}
    assert a["numaNode"] == {"int": 0}
    assert a["uuid"]["string"].startswith("GPU-")
    assert a["driverVersion"] == {"string": "550.90.07"}
    assert a[PCIE_ROOT_ATTR] == {"string": "pci0000:18"}
    assert a[PCI_BUS_ID_ATTR] == {"string": "0000:1b:00.0"}
    assert gpu["capacity"] == {"kubeacc.io/memory": {"value": "85520809984"}}
    assert "taints" not in gpu
    assert "productName" not in a  # it repeated model


def _own_attributes(entry: dict[str, Any]) -> list[str]:
    """The names of an entry's attributes in the driver's domain (no domain, or kubeacc.io/)."""
    return [n for n in entry["attributes"] if "/" not in n or n.startswith("kubeacc.io/")]


@pytest.mark.parametrize("profile", profiles.NAMES)
def test_a_physical_device_keeps_its_driver_attributes_in_one_small_map(
    make_inventory: Callable[[str], Inventory], profile: str
) -> None:
    """kube-scheduler copies a device's attributes into a Go map per domain for every selector
    it evaluates; past 8 entries the map becomes a hashed table (docs/dra.md)."""
    physical = [
        d for d in slice_devices(make_inventory(profile)) if "sriovVF" not in d["attributes"]
    ]
    assert physical
    worst = max(physical, key=lambda d: len(_own_attributes(d)))
    assert len(_own_attributes(worst)) <= SMALL_DOMAIN, (worst["name"], _own_attributes(worst))


def test_a_gpu_fills_the_small_map_exactly(dgx: Inventory) -> None:
    gpu = next(d for d in slice_devices(dgx) if d["attributes"]["type"] == {"string": "gpu"})
    assert sorted(_own_attributes(gpu)) == sorted(
        ["type", "vendor", "model", "index", "numaNode", "uuid", "units", "driverVersion"]
    )


def test_standard_numa_attribute_only_where_the_numa_node_is_known(dgx: Inventory) -> None:
    dgx.devices[0].numa_node = -1  # the platform reports none
    devs = slice_devices(dgx)
    assert {d["attributes"]["type"]["string"] for d in devs} >= {"gpu", "nic"}
    for d in devs:
        own = d["attributes"]["numaNode"]
        if own["int"] < 0:
            assert NUMA_NODE_ATTR not in d["attributes"], d["name"]
        else:
            assert d["attributes"][NUMA_NODE_ATTR] == own, d["name"]
    first = next(d for d in devs if d["name"] == dgx.devices[0].name)
    assert NUMA_NODE_ATTR not in first["attributes"]
    vfs = [d for d in devs if "sriovVF" in d["attributes"]]
    assert vfs and all(NUMA_NODE_ATTR in d["attributes"] for d in vfs)


def test_every_name_is_a_dns_label_and_attribute_limits_hold(dgx: Inventory) -> None:
    devs = slice_devices(dgx)
    assert all(DNS_LABEL.match(d["name"]) for d in devs)
    assert len({d["name"] for d in devs}) == len(devs)
    for d in devs:
        assert len(d["attributes"]) + len(d.get("capacity", {})) <= 32
        for v in d["attributes"].values():
            assert len(str(v.get("string", ""))) <= 64


def test_sriov_vfs_are_devices_of_their_own(dgx: Inventory) -> None:
    pf = next(d for d in dgx.devices if d.virtual_functions)
    devs = {d["name"]: d for d in slice_devices(dgx)}
    vf0 = devs[f"{pf.name}-vf{pf.partitions[0].index}"]
    assert vf0["attributes"]["physicalFunction"] == {"string": pf.name}
    assert vf0["attributes"]["type"] == {"string": "nic"}
    assert pf.partitions[0].kind is PartitionKind.SRIOV_VF
    assert vf0["attributes"][PCI_BUS_ID_ATTR] == {"string": pf.partitions[0].bus_id}
    n_vfs = sum(len(d.virtual_functions) for d in dgx.devices)
    assert len(devs) == len(dgx.devices) + n_vfs


def test_fpga_interface_and_afu(make_inventory) -> None:  # type: ignore[no-untyped-def]
    inv = make_inventory("intel-fpga-dfl")
    devs = {d["name"]: d for d in slice_devices(inv)}
    a = devs["fpga-0000-3b-00-0"]["attributes"]
    assert a["interfaceId"] == {"string": "69528db6eb31577a8c3668f9faa081f6"}
    assert a["afuId"] == {"string": "d8424dc4a4a3c413f89e433683f9040b"}


def test_unhealthy_device_is_tainted(dgx: Inventory) -> None:
    dgx.devices[0].health = Health(state=HealthState.UNHEALTHY, reason="XID 79")
    devs = {d["name"]: d for d in slice_devices(dgx)}
    assert devs[dgx.devices[0].name]["taints"] == [
        {"key": UNHEALTHY_TAINT, "value": "unhealthy", "effect": "NoSchedule"}
    ]
    info = device_index(dgx)[dgx.devices[0].name]
    assert info.healthy is HealthState.UNHEALTHY
    assert info.bus_id == dgx.devices[0].pci.bus_id  # type: ignore[union-attr]
