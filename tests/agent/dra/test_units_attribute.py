"""Normalized units (kubeacc.units) published as the slice attribute ``kubeacc.io/units``."""

from __future__ import annotations

from kubeacc.agent.dra.devices import slice_devices
from kubeacc.model import Inventory
from kubeacc.units.table import build, use_table


def test_gpus_and_xpus_carry_their_units(dgx: Inventory, make_inventory) -> None:  # type: ignore[no-untyped-def]
    gpus = [d for d in slice_devices(dgx) if d["attributes"]["type"]["string"] == "gpu"]
    assert gpus and all(d["attributes"]["units"] == {"int": 989} for d in gpus)
    nics = [d for d in slice_devices(dgx) if d["attributes"]["type"]["string"] == "nic"]
    assert nics and not any("units" in d["attributes"] for d in nics)
    xpus = [
        d
        for d in slice_devices(make_inventory("kunlun-xpu"))
        if d["attributes"]["type"]["string"] == "xpu"
    ]
    assert xpus and all(d["attributes"]["units"] == {"int": 128} for d in xpus)


def test_the_admins_table_decides(dgx: Inventory) -> None:
    try:
        use_table(build({"H100": 7}, defaults=False))
        gpu = next(d for d in slice_devices(dgx) if d["attributes"]["type"]["string"] == "gpu")
        assert gpu["attributes"]["units"] == {"int": 7}
        use_table(build({"A100": 7}, defaults=False))
        gpu = next(d for d in slice_devices(dgx) if d["attributes"]["type"]["string"] == "gpu")
        assert "units" not in gpu["attributes"]
    finally:
        use_table(None)
