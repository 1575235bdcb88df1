"""The allocation rules behind Allocate and GetPreferredAllocation (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.deviceplugin.allocation import AllocationError, allocate, physical, prefer
from kubeacc.deviceplugin.config import (
    DevicePluginConfigError,
    TypeConfig,
    load_config,
    parse_config,
    resource_names,
)
from kubeacc.model import DeviceType, Health, HealthState, Inventory
from kubeacc.topology.graph import TopologyGraph
from tests.hosts import HostFactory, discover


@pytest.fixture
def dgx(hosts: HostFactory) -> Inventory:
    return discover(hosts.pristine("dgx-h100"), nvml="off")


def _gpus(inv: Inventory) -> dict[str, object]:
    return {d.pci_bus_id: d for d in inv.by_type(DeviceType.GPU)}  # type: ignore[misc]


def test_allocate_hands_out_nodes_env_and_cdi_names(dgx: Inventory) -> None:
    gpus = {d.pci_bus_id: d for d in dgx.by_type(DeviceType.GPU) if d.pci_bus_id}
    ids = sorted(gpus)[:2]
    got = allocate(gpus, ids, cdi_kind="kubeacc.io/device")
    assert got.envs["ACCELERATOR_UNITS"] == ",".join(ids)
    assert got.envs["ACCELERATOR_TYPE"] == "gpu"
    assert got.envs["NVIDIA_VISIBLE_DEVICES"].count("GPU-") == 2
    assert "/dev/nvidiactl" in got.device_nodes
    assert len([n for n in got.device_nodes if n[11:].isdigit()]) == 2
    assert got.cdi_devices == [f"kubeacc.io/device={gpus[i].name}" for i in ids]


def test_a_request_that_cannot_be_honoured_fails_as_a_whole(dgx: Inventory) -> None:
    gpus = {d.pci_bus_id: d for d in dgx.by_type(DeviceType.GPU) if d.pci_bus_id}
    first, second = sorted(gpus)[:2]
    with pytest.raises(AllocationError, match="unknown device"):
        allocate(gpus, [first, "0000:ff:00.0"])
    gpus[second].health = Health(state=HealthState.UNHEALTHY, reason="x")
    with pytest.raises(AllocationError, match="unhealthy"):
        allocate(gpus, [first, second])
    with pytest.raises(AllocationError, match="no devices"):
        allocate(gpus, [])


def test_preferred_allocation_keeps_to_one_numa_node_and_must_include(dgx: Inventory) -> None:
    gpus = dgx.by_type(DeviceType.GPU)
    graph = TopologyGraph.from_inventory(Inventory(devices=gpus))
    numa = {d.pci_bus_id: d.numa_node for d in gpus}
    available = [d.pci_bus_id for d in gpus if d.pci_bus_id]
    for size in (2, 3, 4):
        picked = prefer(graph, available, [], size)
        assert len(picked) == size and len({numa[b] for b in picked}) == 1
    must = [available[-1]]
    picked = prefer(graph, available, must, 2)
    assert must[0] in picked and len({numa[b] for b in picked}) == 1
    # On one NUMA node, two GPUs behind the same PCIe switch beat two on different switches.
    roots = {d.pci_bus_id: d.pcie_root for d in gpus}
    picked = prefer(graph, available, [], 2)
    assert roots[picked[0]] == roots[picked[1]]


def test_sharing_spread_and_packed(dgx: Inventory) -> None:
    gpus = dgx.by_type(DeviceType.GPU)[:4]
    graph = TopologyGraph.from_inventory(Inventory(devices=gpus))
    ids = [f"{d.pci_bus_id}::{r}" for d in gpus for r in range(4)]
    spread = prefer(graph, ids, [], 3, "spread")
    assert len({physical(i) for i in spread}) == 3
    packed = prefer(graph, ids, [], 3, "packed")
    assert len({physical(i) for i in packed}) == 1
    # A device already partly used is filled first when packing.
    partly = [i for i in ids if not i.startswith(gpus[2].pci_bus_id or "?") or i.endswith("::3")]
    packed = prefer(graph, partly, [], 1, "packed")
    assert physical(packed[0]) == gpus[2].pci_bus_id


def test_resource_names(dgx: Inventory) -> None:
    gpu = dgx.by_type(DeviceType.GPU)[0]
    assert resource_names(gpu, TypeConfig()) == ["kubeacc.io/gpu"]
    assert resource_names(gpu, TypeConfig(per_model=True)) == ["kubeacc.io/gpu-h100-80gb-hbm3"]
    nic = dgx.by_type(DeviceType.NIC)[0]
    assert resource_names(nic, TypeConfig(per_model=False)) == ["kubeacc.io/nic"]
    cfg = parse_config({"types": {"gpu": {"replicas": 2, "perModel": False}}})
    assert cfg.types[DeviceType.GPU].replicas == 2


@pytest.mark.parametrize(
    ("types", "message"),
    [
        ("gpu: {generic: true, perModel: true}", "could go to two pods at once; choose one"),
        ("gpu: {generic: false}", "would serve nothing"),
    ],
)
def test_contradictory_type_config_is_refused(tmp_path: Path, types: str, message: str) -> None:
    path = tmp_path / "dp.yaml"
    path.write_text(f"types:\n  {types}\n")
    with pytest.raises(DevicePluginConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert text.startswith(f"{path}: types.gpu: generic and perModel both"), text
    assert message in text and "\n" not in text
