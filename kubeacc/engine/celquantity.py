"""How kube-scheduler's Go code holds a quantity, where CEL can tell: ``isInteger()`` and
``asInteger()``.

``resource.Quantity`` keeps a value either as a 64-bit integer with a decimal scale
(``int64Amount{value, scale}``) or as an arbitrary-precision decimal (``inf.Dec``), depending on
how it was written, and ``AsInt64`` (which ``isInteger``/``asInteger`` call) succeeds only for
the integer form with a scale of zero or more. So ``0.5Ti`` (a binary suffix with a fraction, a
decimal), ``1Pi`` (too many digits for the fast path), ``1000m`` (scale -3) and ``1.000``
(scale -3) are whole numbers that ``asInteger()`` refuses ("cannot convert value to integer").
``add``/``sub`` keep the integer form while both operands have it and nothing overflows, at the
smaller scale (``1500m + 500m`` is ``2000`` at scale -3), and turn a decimal otherwise.

The form travels with the value as a representation string (``rep`` of the Quantity message):
``""`` for an integer form with a scale of zero or more (the usual one), ``"-3"`` for scale
-3, ``"dec"`` for the decimal form. Two quantities of equal value and different forms are equal
in Go; ``==`` and ``!=`` between quantities are renamed in the checked expression to functions
comparing values (:mod:`kubeacc.engine.celquantityeq`). Read from k8s.io/apimachinery v0.37.2
``pkg/api/resource`` (``ParseQuantity``, ``int64Amount.Add``, ``AsInt64``).

Not followed: an addition whose operands overflow 64 bits only while aligned to a common
positive scale (values past 9.2·10^18), and quantities compared as ``dyn`` values, inside
lists by ``in`` or list equality (those compare forms too).
"""

from __future__ import annotations

import re
from fractions import Fraction

#: the form of an integer with a scale of zero or more, the form of a decimal
INT, DEC = "", "dec"
INT64_MAX = 2**63 - 1
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
#: sign, digits before the point, digits after it (None: no point), suffix
_PARTS = re.compile(r"^([+-]?)(\d*)(?:\.(\d*))?(.*)$")


def go_rep(text: str) -> str:
    """The form ``resource.ParseQuantity(text)`` gives (``text`` parses as a quantity)."""
    s = text.strip()
    if s == "0":
        return INT
    m = _PARTS.match(s)
    if m is None:
        return DEC
    _, whole, frac, suffix = m.groups()
    num = whole.lstrip("0") or "0"
    denom = frac or ""
    if whole and not whole.strip("0") and frac is None and not suffix:
        return INT  # all zeros: Go stops at them (num "0", no suffix)
    if suffix in _BINARY:
        if denom:
            return DEC
        exponent = _BINARY[suffix]
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        scale = 0
    else:
        if suffix in _DECIMAL:
            scale = _DECIMAL[suffix]
        elif len(suffix) > 1 and suffix[0] in "eE":
            scale = int(suffix[1:])
        else:
            return DEC
        mantissa = 1
        precision = 18 - (len(num) + len(denom))
    if precision < 0:
        return DEC
    scale -= len(denom)
    if scale < -9:
        return DEC
    value = int(num + denom)
    if value > INT64_MAX or value * mantissa > INT64_MAX:
        return DEC
    return INT if scale >= 0 else str(scale)


def _scale(rep: str) -> int | None:
    """The negative scale of an integer form, None for a scale of zero or more."""
    return int(rep) if rep not in (INT, DEC) else None


def add_rep(a: Fraction, a_rep: str, b: Fraction, b_rep: str) -> str:
    """The form of ``a + b`` (``sub`` adds the negated value in the same form)."""
    if DEC in (a_rep, b_rep):
        return DEC
    if b == 0:
        return a_rep
    if a == 0:
        return b_rep
    scales = [s for s in (_scale(a_rep), _scale(b_rep)) if s is not None]
    if not scales:
        return INT
    common = min(scales)
    factor = Fraction(10) ** -common
    if any(abs(v * factor) > INT64_MAX for v in (a, b, a + b)):
        return DEC
    return str(common)


def as_int64(value: Fraction, rep: str) -> int | None:
    """``Quantity.AsInt64``: the value when Go can give it as an int64, else None."""
    if rep != INT or value.denominator != 1 or not -(2**63) <= value <= INT64_MAX:
        return None
    return int(value)
