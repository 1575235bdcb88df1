"""Shared GPUs in device-plugin mode: anonymous units and the extender's decisions."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.wants import Assigned, Decision
from kubeacc.deviceplugin.allocation import AllocationError
from kubeacc.deviceplugin.config import DevicePluginConfigError, parse_config
from kubeacc.deviceplugin.manager import DevicePluginManager
from kubeacc.deviceplugin.shared import (
    MAX_MEMORY_UNITS,
    DecisionLookup,
    Kind,
    shared_allocate,
    unit_ids,
)
from kubeacc.model import Device, DeviceType, Inventory
from tests.hosts import HostFactory, discover

MEMORY = "kubeacc.io/gpu-memory"
CORES = "kubeacc.io/gpu-cores"


@pytest.fixture
def edge(hosts: HostFactory) -> Inventory:
    """One NVIDIA L4 (23034 MiB)."""
    return discover(hosts.pristine("edge-mixed"), nvml="on")


def _gpus(inv: Inventory) -> dict[str, Device]:
    return {d.pci_bus_id: d for d in inv.by_type(DeviceType.GPU) if d.pci_bus_id}


def _pod(
    name: str, limits: dict[str, str], decision: Decision | None, created: str, phase: str = ""
) -> dict[str, Any]:
    notes = {DECISION_ANNOTATION: decision.to_json()} if decision else {}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": notes,
            "creationTimestamp": created,
        },
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": phase or "Pending"},
    }


def test_shared_config_serves_memory_cores_and_whole_units(tmp_path: Any, edge: Inventory) -> None:
    cfg = parse_config({"types": {"gpu": {"shared": True}}})
    states = DevicePluginManager(tmp_path, cfg).states(edge)
    assert sorted(states) == ["kubeacc.io/gpu", CORES, MEMORY]
    assert len(states[MEMORY].listing()) == 23034
    assert len(states[CORES].listing()) == 100
    assert [d.ID for d in states["kubeacc.io/gpu"].listing()] == ["g0"]
    ids = [d.ID for d in states[MEMORY].listing()]
    assert len(set(ids)) == len(ids) and max(len(i) for i in ids) <= 7


def test_memory_units_are_capped_at_what_the_kubelet_can_read(hosts: HostFactory) -> None:
    gpus = list(_gpus(discover(hosts.pristine("dgx-h100"), nvml="on")).values())
    units = unit_ids(Kind.MEMORY, gpus)
    assert len(units) <= MAX_MEMORY_UNITS
    assert len({d.name for _, d in units}) == MAX_MEMORY_UNITS // 81559  # whole GPUs only


@pytest.mark.parametrize(
    ("types", "message"),
    [
        ({"nic": {"shared": True}}, "only GPUs are shared by memory"),
        ({"gpu": {"shared": True, "replicas": 2}}, "choose one way of sharing"),
    ],
)
def test_shared_config_mistakes(tmp_path: Any, types: dict[str, Any], message: str) -> None:
    f = tmp_path / "dp.yaml"
    import yaml

    f.write_text(yaml.safe_dump({"types": types}))
    from kubeacc.deviceplugin.config import load_config

    with pytest.raises(DevicePluginConfigError, match=message):
        load_config(f)


def test_allocate_hands_decisions_out_in_the_order_they_were_made(edge: Inventory) -> None:
    gpus = _gpus(edge)
    (bdf,) = gpus

    def share(at: float, cores: int = 25) -> Decision:
        return Decision("node-a", (Assigned("main", (bdf,), memory=4096, cores=cores),), at)

    pods = [
        _pod("second", {MEMORY: "4096", CORES: "25"}, share(2.0), "2026-01-01T00:00:00Z"),
        _pod("first", {MEMORY: "4096", CORES: "25"}, share(1.0), "2026-01-01T00:00:00Z"),
        _pod("done", {MEMORY: "4096"}, share(0.5), "2026-01-01T00:00:00Z", phase="Succeeded"),
        _pod("other-size", {MEMORY: "100"}, share(0.1), "2026-01-01T00:00:00Z"),
    ]
    lookup = DecisionLookup("node-a", lambda: pods)
    first = lookup.find(MEMORY, Kind.MEMORY, 4096)
    assert first.pod == "ns/first"
    got = shared_allocate(Kind.MEMORY, first, gpus, None)
    assert got.envs["ACCELERATOR_UNITS"] == bdf
    assert got.envs["KUBEACC_DEVICE_MEMORY_LIMIT"] == "4096"
    assert got.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert "KUBEACC_DEVICE_CORES_LIMIT" not in got.envs
    assert "/dev/nvidia0" in got.device_nodes
    # the same container's next resource comes from the same decision
    cores_found = lookup.find(CORES, Kind.CORES, 25)
    assert cores_found.pod == "ns/first"
    cores = shared_allocate(Kind.CORES, cores_found, gpus, None)
    assert cores.envs["KUBEACC_DEVICE_CORES_LIMIT"] == "25"
    assert cores.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # each decision once per resource: then the second pod, then nobody
    assert lookup.find(MEMORY, Kind.MEMORY, 4096).pod == "ns/second"
    with pytest.raises(AllocationError, match="no kubeacc extender decision"):
        lookup.find(MEMORY, Kind.MEMORY, 4096)


def test_what_the_kubelet_already_allocated_is_not_handed_out_again(edge: Inventory) -> None:
    (bdf,) = _gpus(edge)
    share = Decision("node-a", (Assigned("main", (bdf,), memory=10),))
    pods = [_pod("p", {MEMORY: "10"}, share, "2026-01-01T00:00:00Z")]
    lookup = DecisionLookup("node-a", lambda: pods, lambda: {("ns/p", "main", MEMORY)})
    with pytest.raises(AllocationError, match="no kubeacc extender decision"):
        lookup.find(MEMORY, Kind.MEMORY, 10)


def test_a_pod_without_a_decision_is_refused_with_a_hint(edge: Inventory) -> None:
    pods = [_pod("p", {MEMORY: "10"}, None, "2026-01-01T00:00:00Z")]
    with pytest.raises(AllocationError, match=r"1 container\(s\) ask for it without one"):
        DecisionLookup("node-a", lambda: pods).find(MEMORY, Kind.MEMORY, 10)
    elsewhere = Decision("node-b", (Assigned("main", ("0000:01:00.0",), memory=10),))
    pods = [_pod("p", {MEMORY: "10"}, elsewhere, "2026-01-01T00:00:00Z")]
    with pytest.raises(AllocationError, match="no kubeacc extender decision"):
        DecisionLookup("node-a", lambda: pods).find(MEMORY, Kind.MEMORY, 10)


def test_a_decided_gpu_that_is_gone_is_an_error(edge: Inventory) -> None:
    share = Decision("node-a", (Assigned("main", ("0000:99:00.0",), memory=10),))
    pods = [_pod("p", {MEMORY: "10"}, share, "2026-01-01T00:00:00Z")]
    found = DecisionLookup("node-a", lambda: pods).find(MEMORY, Kind.MEMORY, 10)
    with pytest.raises(AllocationError, match=r"0000:99:00.0 not on this node"):
        shared_allocate(Kind.MEMORY, found, _gpus(edge), None)


UNITS = "kubeacc.io/gpu-units"


def test_units_are_served_from_the_unit_table(tmp_path: Any, hosts: HostFactory) -> None:
    from kubeacc.units.table import build, use_table

    inv = discover(hosts.pristine("l4-pair"), nvml="on")
    cfg = parse_config({"types": {"gpu": {"shared": True, "units": True}}})
    states = DevicePluginManager(tmp_path, cfg).states(inv)
    assert sorted(states) == ["kubeacc.io/gpu", CORES, MEMORY, UNITS]
    ids = [d.ID for d in states[UNITS].listing()]
    assert len(ids) == 2 * 121 and len(set(ids)) == len(ids)  # L4: 121 units each
    try:
        use_table(build({"L4": 5}, defaults=False))
        assert len(states[UNITS].listing()) == 10
        use_table(build({"T4": 5}, defaults=False))  # no entry for L4: nothing to advertise
        assert states[UNITS].listing() == []
    finally:
        use_table(None)


def test_units_need_shared(tmp_path: Any) -> None:
    import yaml

    from kubeacc.deviceplugin.config import load_config

    f = tmp_path / "dp.yaml"
    f.write_text(yaml.safe_dump({"types": {"gpu": {"units": True}}}))
    with pytest.raises(DevicePluginConfigError, match="units without shared"):
        load_config(f)


def test_allocate_hands_a_units_container_its_decided_gpus(hosts: HostFactory) -> None:
    gpus = _gpus(discover(hosts.pristine("l4-pair"), nvml="on"))
    both = tuple(sorted(gpus))
    decided = Decision("node-a", (Assigned("main", both, whole=True, units=200),), 1.0)
    pods = [
        _pod("units", {UNITS: "200"}, decided, "2026-01-01T00:00:00Z"),
        _pod("shares", {MEMORY: "200"}, None, "2026-01-01T00:00:00Z"),
    ]
    lookup = DecisionLookup("node-a", lambda: pods)
    found = lookup.find(UNITS, Kind.UNITS, 200)
    got = shared_allocate(Kind.UNITS, found, gpus, None)
    assert got.envs["ACCELERATOR_UNITS"] == ",".join(both)
    assert "KUBEACC_DEVICE_MEMORY_LIMIT" not in got.envs
    with pytest.raises(AllocationError, match="no kubeacc extender decision"):
        lookup.find(UNITS, Kind.UNITS, 200)


def test_a_forged_decision_gets_no_gpu(edge: Inventory) -> None:
    # a 1 MiB request with a whole GPU written by hand
    (bdf,) = _gpus(edge)
    forged = Decision("node-a", (Assigned("main", (bdf,), whole=True),))
    pods = [_pod("forger", {MEMORY: "1"}, forged, "2026-01-01T00:00:00Z")]
    with pytest.raises(AllocationError, match="refused: container 'main': asks for a share"):
        DecisionLookup("node-a", lambda: pods).find(MEMORY, Kind.MEMORY, 1)


def test_a_share_never_lands_on_a_gpu_another_pod_holds_whole(edge: Inventory) -> None:
    gpus = _gpus(edge)
    (bdf,) = gpus
    victim = Decision("node-a", (Assigned("main", (bdf,), whole=True),), 1.0)
    share = Decision("node-a", (Assigned("main", (bdf,), memory=1),), 2.0)
    pods = [
        _pod("victim", {"kubeacc.io/gpu": "1"}, victim, "2026-01-01T00:00:00Z"),
        _pod("forger", {MEMORY: "1"}, share, "2026-01-01T00:00:00Z"),
    ]
    lookup = DecisionLookup("node-a", lambda: pods)
    served = lookup.find("kubeacc.io/gpu", Kind.WHOLE, 1)
    assert shared_allocate(Kind.WHOLE, served, gpus, None).envs["ACCELERATOR_UNITS"] == bdf
    found = lookup.find(MEMORY, Kind.MEMORY, 1)
    with pytest.raises(AllocationError, match="is held by another pod"):
        shared_allocate(Kind.MEMORY, found, gpus, None)


def test_shares_never_over_commit_a_gpu(edge: Inventory) -> None:
    gpus = _gpus(edge)
    (bdf,) = gpus
    big = Decision("node-a", (Assigned("main", (bdf,), memory=20000, cores=60),), 1.0)
    more = Decision("node-a", (Assigned("main", (bdf,), memory=4000, cores=30),), 2.0)
    third = Decision("node-a", (Assigned("main", (bdf,), memory=1000, cores=60),), 3.0)
    pods = [
        _pod("first", {MEMORY: "20000", CORES: "60"}, big, "2026-01-01T00:00:00Z"),
        _pod("second", {MEMORY: "4000", CORES: "30"}, more, "2026-01-01T00:00:00Z"),
        _pod("third", {MEMORY: "1000", CORES: "60"}, third, "2026-01-01T00:00:00Z"),
    ]
    lookup = DecisionLookup("node-a", lambda: pods)
    shared_allocate(Kind.MEMORY, lookup.find(MEMORY, Kind.MEMORY, 20000), gpus, None)
    shared_allocate(Kind.CORES, lookup.find(CORES, Kind.CORES, 60), gpus, None)
    with pytest.raises(AllocationError, match="4000 MiB do not fit next to the 20000 MiB"):
        lookup.find(MEMORY, Kind.MEMORY, 4000, gpus)
    with pytest.raises(AllocationError, match="60% of its cores do not fit next to the 60%"):
        lookup.find(MEMORY, Kind.MEMORY, 1000, gpus)
