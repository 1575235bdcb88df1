"""What the DRA driver publishes: ``--dra-publish`` kinds, the default (no VFs), the split."""

from __future__ import annotations

import pytest

from kubeacc.agent.dra.devices import device_index, slice_devices
from kubeacc.agent.dra.publishing import KINDS, VF, Publishing
from kubeacc.agent.runner import dra_part
from kubeacc.model import DeviceType, Inventory


def _types(devices: list[dict[str, object]]) -> set[str]:
    return {d["attributes"]["type"]["string"] for d in devices}  # type: ignore[index]


def _vfs(devices: list[dict[str, object]]) -> list[str]:
    return [str(d["name"]) for d in devices if "sriovVF" in d["attributes"]]  # type: ignore[operator]


def test_the_default_is_every_type_and_no_vf() -> None:
    assert Publishing.parse([]) == Publishing(frozenset(DeviceType), vfs=False)
    assert Publishing() == Publishing.parse([])


def test_every_kind_publishes_vfs_too() -> None:
    assert Publishing.parse(KINDS) == Publishing(frozenset(DeviceType), vfs=True)
    assert VF in KINDS and "gpu" in KINDS


@pytest.mark.parametrize(
    ("kinds", "message"),
    [
        (["gpu", "tpu"], "--dra-publish: unknown kind tpu (one of gpu, fpga, nic, xpu, "),
        (["GPU"], "unknown kind GPU"),
        (["gpu", "vf"], "--dra-publish vf needs --dra-publish nic"),
    ],
)
def test_a_wrong_kind_is_refused(kinds: list[str], message: str) -> None:
    with pytest.raises(ValueError) as err:
        Publishing.parse(kinds)
    assert message in str(err.value)


def test_the_default_publishes_nics_without_their_vfs(dgx: Inventory) -> None:
    inv = dra_part(dgx, frozenset(), Publishing())
    devices = slice_devices(inv, vfs=Publishing().vfs)
    assert _types(devices) == {"gpu", "nic"}
    assert len(devices) == 16 and _vfs(devices) == []
    assert all("-vf" not in name for name in device_index(inv, vfs=False))


def test_vf_publishes_every_enabled_vf_beside_its_nic(dgx: Inventory) -> None:
    chosen = Publishing.parse(["gpu", "nic", "vf"])
    inv = dra_part(dgx, frozenset(), chosen)
    devices = slice_devices(inv, vfs=chosen.vfs)
    assert len(_vfs(devices)) == 64 and len(devices) == 80
    index = device_index(inv, vfs=chosen.vfs)
    assert set(index) == {str(d["name"]) for d in devices}


def test_types_left_out_are_not_published(dgx: Inventory) -> None:
    chosen = Publishing.parse(["gpu"])
    devices = slice_devices(dra_part(dgx, frozenset(), chosen), vfs=chosen.vfs)
    assert _types(devices) == {"gpu"} and len(devices) == 8
    # every type published: the inventory is handed on as it is
    assert Publishing().keep(dgx) is dgx


def test_the_device_plugin_still_takes_its_types_from_dra(dgx: Inventory) -> None:
    inv = dra_part(dgx, frozenset({DeviceType.NIC}), Publishing.parse(KINDS))
    assert {d.type for d in inv.devices} == {DeviceType.GPU}
    assert _vfs(slice_devices(inv, vfs=True)) == []
