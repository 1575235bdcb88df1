"""Kubernetes resource quantities (``resource.Quantity``), exact.

Grammar: ``<sign><digits>[.<digits>]<suffix>`` where the suffix is a binary SI suffix
(Ki Mi Gi Ti Pi Ei), a decimal SI suffix (n u m "" k M G T P E) or a decimal exponent
(``e``/``E`` followed by a signed integer). Values are kept as :class:`fractions.Fraction` so
comparisons and sums never round. As the API's parser does, a value written with a binary suffix
is capped at the largest 64-bit integer (``9Ei`` reads as 9223372036854775807), so capacity
requests and policies compare as kube-scheduler's allocator sees them.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
#: the cap on values written with a binary suffix (Go's MaxInt64)
BINARY_MAX = 2**63 - 1
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class QuantityError(ValueError):
    pass


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity string (ints pass through)."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(text)
    m = _RE.match(text.strip())
    if not m:
        raise QuantityError(
            f"quantities must match the regular expression "
            f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    sign, number, suffix = m.group(1), m.group(2), m.group(3) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        value *= _BINARY[suffix]
        if sign != "-" and value > BINARY_MAX:
            value = Fraction(BINARY_MAX)
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    return -value if sign == "-" else value


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def format_quantity(value: Fraction) -> str:
    """A canonical spelling: binary suffix for whole multiples of 1024, else decimal."""
    if value.denominator == 1:
        n = int(value)
        if n != 0:
            for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                if n % _BINARY[suffix] == 0:
                    return f"{n // _BINARY[suffix]}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    nano = value * 10**9
    return f"{-(-nano.numerator // nano.denominator)}n"  # round up, as Kubernetes does
