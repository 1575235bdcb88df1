"""Verdicts shared by devices that agree on what a selector reads."""

from __future__ import annotations

import pytest

from kubeacc.engine.celreads import selector_reads, view
from kubeacc.engine.engine import Engine
from tests.engine.helpers import claim, device_class, devices_of, exactly, gpu, slice_

A = 'device.attributes["kubeacc.io"]'
C = 'device.capacity["kubeacc.io"]'


@pytest.mark.parametrize(
    ("expr", "reads"),
    [
        (f'{A}.model == "h100"', (("attributes", "kubeacc.io", "model"),)),
        (
            f'{C}.memory.compareTo(quantity("64Gi")) >= 0 && {A}["numaNode"] == 0',
            (("attributes", "kubeacc.io", "numaNode"), ("capacity", "kubeacc.io", "memory")),
        ),
        (
            f'device.driver == "kubeacc.io" && has({A}.ecc)',
            (("attributes", "kubeacc.io", "ecc"), ("driver",)),
        ),
        ("1 < 2", ()),
    ],
)
def test_reads(expr: str, reads: tuple[tuple[str, ...], ...]) -> None:
    assert selector_reads(expr) == reads


@pytest.mark.parametrize(
    "expr",
    [
        f'cel.bind(a, {A}, a.model == "h100")',
        f'"model" in {A}',
        f'{A}.exists(k, k == "model")',
        f"{A}.size() > 2",
        f"{A}.?model.orValue('') == 'h100'",
        '["h100"].exists(device, device == "h100")',
        f'{A}.model == "h100" && device != {{}}',
        "device.attributes[",  # does not compile
    ],
)
def test_other_uses_of_device_make_no_key(expr: str) -> None:
    assert selector_reads(expr) is None


def test_view_tells_missing_from_present() -> None:
    paths = (("attributes", "d", "x"),)
    assert view({"attributes": {"d": {}}}, paths) != view({"attributes": {"d": {"x": 1}}}, paths)
    assert view({"attributes": {"d": {"x": 1}}}, paths) != view(
        {"attributes": {"d": {"x": "1"}}}, paths
    )
    assert view({"attributes": {}}, paths) == view({"attributes": {"d": {}}}, paths)


def test_devices_differing_in_what_is_read_get_their_own_verdicts() -> None:
    devs = [
        gpu("gpu-0", model="a100", root="pci0000:10"),
        gpu("gpu-1", model="h100", root="pci0000:20"),
        gpu("gpu-2", model="h100", root="pci0000:30", memory="40Gi"),
        {
            **gpu("gpu-3", model="h100", root="pci0000:40"),
            "attributes": {"type": {"string": "gpu"}},
        },
    ]
    eng = Engine([slice_("n0", devs)], [device_class()], nodes=[{"metadata": {"name": "n0"}}])
    sel = f'{A}.model == "h100" && {C}.memory.compareTo(quantity("64Gi")) >= 0'
    p = eng.allocate(claim(exactly(count=1, selectors=[sel])), commit=False)
    assert devices_of(p.allocation or {}) == ["gpu-1"]
    missing = eng.allocate(claim(exactly(count=4, selectors=[f"!has({A}.model) || true"])))
    assert missing.ok
