"""What one allocation consumes of a device's capacities, as kube-scheduler's allocator works it
out from the claim's ``capacity.requests`` and each capacity's ``requestPolicy``.

The allocator rounds a request up within ``validRange`` (from ``min`` in whole ``step``s, on the
integer values of the quantities, each rounded up to a whole number) or to the first of
``validValues`` at least as large; a capacity not requested consumes the policy's ``default``,
else all of it. The result must then satisfy the policy (``max``, a whole number of steps from
``min``, one of ``validValues``) or the device is skipped.

From v1.37 (:attr:`Release.capacity_errors_fail_pod`) two cases are errors that fail the pod
rather than "does not fit": a request the range arithmetic cannot represent (above the largest
64-bit integer, or rounding up to a step past it) and a consumed value below zero (a request,
``default`` or capacity stored before validation rejected them). Both are judged for every
capacity of the device before any fit check, so which capacity the allocator visits first does
not decide between error and skip. v1.36 computes in wrapping 64-bit arithmetic and has neither
error; the engine's exact arithmetic stays for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from kubeacc.engine.claims import Alternative
from kubeacc.engine.pools import Device
from kubeacc.engine.quantity import parse_quantity

#: the largest value of Go's int64, which the allocator's range arithmetic works in
MAX_INT64 = 2**63 - 1
_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


class CapacityError(Exception):
    """A capacity request the allocator refuses outright (v1.37): it fails the pod."""


def ceil_int(q: Fraction) -> int:
    """The quantity's integer value as the allocator reads it (``Value()`` rounds up)."""
    return -(-q.numerator // q.denominator)


def _q(v: Any) -> Fraction:
    return parse_quantity(str(v))


def consumed(
    requested: Fraction | None, total: Fraction, policy: Mapping[str, Any], strict: bool
) -> Fraction:
    """What one allocation consumes of one capacity (``strict``: v1.37's errors)."""
    if requested is None:
        v = _q(policy["default"]) if policy.get("default") is not None else total
    elif not policy:
        v = requested
    else:
        v = _rounded(requested, policy, strict)
    if strict and v < 0:
        raise CapacityError("capacity value is negative")
    return v


def _rounded(requested: Fraction, policy: Mapping[str, Any], strict: bool) -> Fraction:
    rng = policy.get("validRange")
    if rng and rng.get("min") is not None:
        lo = _q(rng["min"])
        if requested < lo:
            return lo
        if rng.get("step") is None:
            return requested
        if strict and requested > MAX_INT64:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {requested} exceeds MaxInt64")
        step = ceil_int(_q(rng["step"]))
        low = ceil_int(lo)
        n = -(-(ceil_int(requested) - low) // step)
        if strict and low >= 0 and n > (MAX_INT64 - low) // step:
            raise CapacityError(
                f"{_NOT_REPRESENTABLE}: rounding request {requested} up to the next step "
                "passes MaxInt64"
            )
        return Fraction(low + step * n)
    if policy.get("validValues") is not None:
        for v in policy["validValues"]:
            q = _q(v)
            if requested <= q:
                return q
    return requested


def violates(v: Fraction, policy: Mapping[str, Any]) -> bool:
    """Whether a consumed value breaks the capacity's request policy."""
    if not policy:
        return False
    if policy.get("default") is not None and _q(policy["default"]) == v:
        return False
    rng = policy.get("validRange")
    if rng is not None:
        if rng.get("max") is not None and v > _q(rng["max"]):
            return True
        if rng.get("step") is not None:
            lo = ceil_int(_q(rng.get("min", "0")))
            return (ceil_int(v) - lo) % ceil_int(_q(rng["step"])) != 0
        return False
    values = policy.get("validValues")
    if values:
        return all(_q(x) != v for x in values)
    return False


def consumption(alt: Alternative, d: Device, strict: bool = False) -> dict[str, Fraction] | None:
    """Per capacity of ``d``, what one allocation for ``alt`` consumes; None: a requested
    capacity the device lacks (the device is skipped). ``strict`` (v1.37): raises
    :class:`CapacityError` for a request the allocator cannot represent or a negative value."""
    requested: dict[str, Fraction] = {}
    for name, q in alt.capacity:
        qn = d.capacity_key(name)
        if qn is None:
            return None
        requested[qn] = q
    out: dict[str, Fraction] = {}
    for c, total in d.capacity.items():
        try:
            out[c] = consumed(requested.get(c), total, d.capacity_policy.get(c, {}), strict)
        except CapacityError as e:
            raise CapacityError(f"capacity {d.written_capacity(c)!r}: {e}") from None
    return out
