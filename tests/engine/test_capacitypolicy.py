"""Capacity requests under a device's requestPolicy as kube-scheduler v1.37's allocator judges
them: requests its 64-bit range arithmetic cannot represent, and negative values, fail the pod;
v1.36 has no such error."""

from __future__ import annotations

from typing import Any

import pytest

from kubeacc.engine.engine import Engine
from kubeacc.engine.quantity import BINARY_MAX, parse_quantity
from tests.engine.helpers import claim, device_class, exactly, gpu, slice_

MEM = "memory"


def shared(name: str, step: str, *, value: str = "80Gi", minimum: str = "2Gi") -> dict[str, Any]:
    dev = gpu(name, allowMultipleAllocations=True)
    dev["capacity"] = {
        MEM: {
            "value": value,
            "requestPolicy": {"default": "4Gi", "validRange": {"min": minimum, "step": step}},
        }
    }
    return dev


def asking(amount: str) -> dict[str, Any]:
    return claim(exactly(capacity={"requests": {MEM: amount}}))


def nodes(*names: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}} for n in names]


def engine(devices: list[dict[str, Any]], version: str = "1.37") -> Engine:
    return Engine([slice_("a", devices)], [device_class()], [], nodes("a"), release=version)


def test_binary_quantities_are_capped_at_max_int64_as_the_api_parses_them() -> None:
    assert parse_quantity("9Ei") == BINARY_MAX
    assert parse_quantity("7Ei") == 7 * 2**60
    assert parse_quantity("10E") == 10**19  # decimal: not capped
    assert parse_quantity("-9Ei") == -9 * 2**60


@pytest.mark.parametrize(
    ("amount", "step", "why"),
    [
        ("10E", "2Gi", "exceeds MaxInt64"),  # above MaxInt64 (a decimal quantity is not capped)
        ("7Ei", "3Ei", "passes MaxInt64"),  # 2Gi + 3 * 3Ei is past MaxInt64
        ("9Ei", "2Gi", "passes MaxInt64"),  # read as MaxInt64, rounded one step past it
    ],
)
def test_an_unrepresentable_request_fails_the_pod_in_137(amount: str, step: str, why: str) -> None:
    e = engine([shared("gpu-0", step)])
    p = e.allocate_pod([asking(amount)])
    assert not p.ok and p.error is not None
    assert "cannot be represented" in p.error and why in p.error and "'memory'" in p.error
    # v1.36 has no such error: the device only does not fit.
    old = engine([shared("gpu-0", step)], "1.36").allocate_pod([asking(amount)])
    assert not old.ok and old.error is None


def test_a_representable_request_is_rounded_and_fits_or_not() -> None:
    # 9Ei is MaxInt64 for the allocator; with step 1 the rounded value is representable and
    # larger than the device: "does not fit", not an error.
    assert engine([shared("gpu-0", "1")]).allocate_pod([asking("9Ei")]).error is None
    p = engine([shared("gpu-0", "2Gi")]).allocate_pod([asking("3Gi")])
    assert p.ok and p.placements[0].allocation is not None
    res = p.placements[0].allocation["devices"]["results"][0]
    assert parse_quantity(res["consumedCapacity"][MEM]) == 4 * 2**30


def test_a_fractional_min_rounds_on_integer_values_like_the_allocator() -> None:
    # min 1500m reads as 2 in the integer arithmetic: a request of 1600m consumes 2.
    p = engine([shared("gpu-0", "1", minimum="1500m")]).allocate_pod([asking("1600m")])
    assert p.ok and p.placements[0].allocation is not None
    res = p.placements[0].allocation["devices"]["results"][0]
    assert parse_quantity(res["consumedCapacity"][MEM]) == 2


def test_a_negative_request_or_capacity_fails_the_pod_in_137() -> None:
    plain = gpu("gpu-0", allowMultipleAllocations=True)
    p = engine([plain]).allocate_pod([asking("-4Gi")])
    assert p.error is not None and "capacity value is negative" in p.error
    # A device whose capacity is negative fails any pod whose search reaches it.
    p = engine([gpu("gpu-0", memory="-1Gi")]).allocate_pod([claim(exactly())])
    assert p.error is not None and "capacity value is negative" in p.error
    assert engine([gpu("gpu-0", memory="-1Gi")], "1.36").allocate_pod([claim(exactly())]).ok


def test_a_device_lacking_the_requested_capacity_is_skipped_before_any_error() -> None:
    # The request names a capacity gpu-0 does not have: gpu-0 is skipped, gpu-1 is taken.
    other = gpu("gpu-0", memory="-1Gi")
    other["capacity"] = {"cores": {"value": "-1"}}
    p = engine([other, shared("gpu-1", "2Gi")]).allocate_pod([asking("4Gi")])
    assert p.ok and p.error is None
