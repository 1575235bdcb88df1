"""``string.format``, as kube-scheduler's CEL environment evaluates it.

kube-scheduler compiles selectors with the cel-go strings extension at version 2, whose
``format`` is the first formatting implementation (not the later one of strings version 4),
with the ``en_US`` locale. That implementation has its own rules, which CEL implementations in
other languages do not share, so the engine runs this one instead of ``cel-expr-python``'s:

* ``%s`` of a double is Go's shortest ``%g`` (``1e+06``, ``1.5``); inside a list or map a double
  is ``%.6f`` and strings, bytes, timestamps and durations are quoted as CEL literals; map
  entries are sorted by their formatted key;
* ``%f`` groups thousands (``1,234.500000``) and drops the sign of a negative zero; ``%e``
  writes a multiplication sign and superscript digits (``1.234568`` then ``\u00d710\u2070\u2075``)
  and its "precision" is a minimum width (the mantissa always has six digits); both accept
  the strings ``NaN``, ``Infinity`` and ``-Infinity``;
* ``%d``, ``%x``, ``%o`` and ``%b`` ignore a precision; ``%x`` of a string or bytes is hex of the
  bytes;
* a clause is read a byte at a time, so a clause letter outside ASCII is reported as the byte.

Errors carry the messages kube-scheduler reports. :func:`scan` is shared with the compile-time
check (:mod:`kubeacc.engine.celformatcheck`).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

from kubeacc.engine.goquote import go_quote
from kubeacc.engine.k8scel import KubernetesCelError

#: the Go type names kube-scheduler reports for this project's opaque Kubernetes values
GO_MESSAGE_NAMES = {
    "Quantity": "kubernetes.Quantity",
    "Semver": "kubernetes.Semver",
    "IP": "net.IP",
    "CIDR": "net.CIDR",
    "URL": "kubernetes.URL",
}
_TYPE_NAMES = {
    "INT": "int",
    "UINT": "uint",
    "DOUBLE": "double",
    "BOOL": "bool",
    "STRING": "string",
    "BYTES": "bytes",
    "LIST": "list",
    "MAP": "map",
    "NULL": "null_type",
    "TYPE": "type",
    "DURATION": "google.protobuf.Duration",
    "TIMESTAMP": "google.protobuf.Timestamp",
    "optional_type": "optional_type",
    "DYN": "dyn",
}
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_TIMES = "\u00d7"
_NON_FINITE = ("NaN", "Infinity", "-Infinity")


class FormatError(KubernetesCelError):
    """A format string or argument kube-scheduler refuses."""


def _clause_error(verb: str, type_name: str) -> FormatError:
    return FormatError(CLAUSE_ERRORS[verb].format(type_name))


#: what a clause says about an argument of a type it does not take, by verb
CLAUSE_ERRORS = {
    "s": "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
    "types, durations, and timestamps, was given {}",
    "d": "decimal clause can only be used on integers, was given {}",
    "f": "fixed-point clause can only be used on doubles, was given {}",
    "e": "scientific clause can only be used on doubles, was given {}",
    "b": "only integers and bools can be formatted as binary, was given {}",
    "x": "only integers, byte buffers, and strings can be formatted as hex, was given {}",
    "o": "octal clause can only be used on integers, was given {}",
}
CLAUSE_ERRORS["X"] = CLAUSE_ERRORS["x"]


class Clauses(Protocol):
    """What :func:`scan` asks of its caller: the arguments and what each clause makes."""

    def size(self) -> int: ...

    def arg(self, index: int) -> Any: ...

    def clause(self, verb: str, precision: int | None, value: Any) -> str: ...


def scan(fmt: str, clauses: Clauses) -> str:
    """Walk the format string as kube-scheduler does (byte by byte, arguments in order)."""
    data = fmt.encode()
    out = bytearray()
    i = index = 0
    while i < len(data):
        if data[i] != 0x25:  # '%'
            out.append(data[i])
            i += 1
            continue
        if i + 1 < len(data) and data[i + 1] == 0x25:
            out.append(0x25)
            i += 2
            continue
        value = clauses.arg(index)
        if i + 1 >= len(data):
            raise FormatError("unexpected end of string")
        if index >= clauses.size():
            raise FormatError(f"index {index} out of range")
        read, verb, precision = _parse_clause(data, i + 1)
        try:
            text = clauses.clause(verb, precision, value)
        except FormatError as e:
            raise FormatError(f"error during formatting: {e}") from None
        out += text.encode()
        i = i + 1 + read
        index += 1
    return out.decode()


def _parse_clause(data: bytes, start: int) -> tuple[int, str, int | None]:
    """(bytes read, verb, precision) of the clause after a ``%``."""
    i = start
    precision: int | None = None
    if data[i] == 0x2E:  # '.'
        i += 1
        digits = bytearray()
        while True:
            if i >= len(data):
                raise FormatError(
                    "could not parse formatting clause: error while parsing precision: "
                    "could not find end of precision specifier"
                )
            if not 0x30 <= data[i] <= 0x39:
                break
            digits.append(data[i])
            i += 1
        precision = _atoi(digits.decode())
    verb = chr(data[i])
    if verb not in CLAUSE_ERRORS:
        raise FormatError(
            f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
        )
    return i + 1 - start, verb, precision


def _atoi(digits: str) -> int:
    problem = "invalid syntax" if not digits else "value out of range"
    if digits and int(digits) < 2**63:
        return int(digits)
    raise FormatError(
        "could not parse formatting clause: error while parsing precision: error while "
        f'converting precision to integer: strconv.Atoi: parsing "{digits}": {problem}'
    )


# -- values ----------------------------------------------------------------------------------


def type_name(value: Any) -> str:
    """The CEL type name kube-scheduler reports for a value (a uint reads as an int here:
    the evaluator hands both over as Python ints)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if value is None:
        return "null_type"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, datetime.datetime):
        return "google.protobuf.Timestamp"
    if isinstance(value, datetime.timedelta):
        return "google.protobuf.Duration"
    if _is_type(value):
        return "type"
    desc = getattr(value, "DESCRIPTOR", None)
    if desc is not None:
        return GO_MESSAGE_NAMES.get(str(desc.name), str(desc.full_name))
    return type(value).__name__


def _is_type(value: Any) -> bool:
    return type(value).__name__ == "Type" and hasattr(value, "is_message")


def cel_type_name(t: Any) -> str:
    """A CEL type value as kube-scheduler prints it (``int``, ``list``, ``kubernetes.Quantity``)."""
    name: str = t.name()
    if t.is_message():
        short = name.rpartition(".")[2]
        return GO_MESSAGE_NAMES.get(short, name)
    base = name.partition("<")[0]
    return _TYPE_NAMES.get(base, base)


def _shortest(x: float) -> tuple[str, int]:
    """The shortest digits that read back as ``abs(x)`` and the decimal point's position
    (``"15", 0`` is 0.15)."""
    _, digits, exp = Decimal(repr(abs(x))).as_tuple()
    assert isinstance(exp, int)
    ds = "".join(map(str, digits))
    point = len(ds) + exp
    ds = ds.rstrip("0")
    return (ds, point) if ds else ("0", 1)


def _fixed_digits(ds: str, point: int, decimals: int) -> str:
    whole = ds[:point].ljust(point, "0") if point > 0 else "0"
    if decimals <= 0:
        return whole
    frac = "".join(ds[k] if 0 <= k < len(ds) else "0" for k in range(point, point + decimals))
    return f"{whole}.{frac}"


def go_g(x: float) -> str:
    """Go's ``strconv.FormatFloat(x, 'g', -1, 64)``, how CEL turns a double into a string."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    ds, point = _shortest(x)
    exp = point - 1
    if exp < -4 or exp >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return sign + _fixed_digits(ds, point, max(len(ds) - point, 0))


def _go_fixed6(x: float) -> str:
    """Go's ``%.6f``: how a double inside a list or map is written."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return f"{x:.6f}"


def _duration(d: datetime.timedelta) -> str:
    micros = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    nanos = micros * 1000
    whole = abs(nanos) // 10**9 * (1 if nanos >= 0 else -1)
    seconds = float(whole) + float(nanos - whole * 10**9) / 1e9
    if seconds == 0:
        return "0s"
    ds, point = _shortest(seconds)
    sign = "-" if seconds < 0 else ""
    return f"{sign}{_fixed_digits(ds, point, max(len(ds) - point, 0))}s"


def _timestamp(t: datetime.datetime) -> str:
    """RFC 3339 with the fraction trimmed (the evaluator hands timestamps over in UTC)."""
    u = t.astimezone(datetime.UTC) if t.tzinfo is not None else t
    frac = f".{u.microsecond:06d}".rstrip("0") if u.microsecond else ""
    return (
        f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}{frac}Z"
    )


def format_value(value: Any) -> str:
    """``%s``: a value as a string; lists and maps as CEL literals."""
    if isinstance(value, list):
        return _list(value)
    if isinstance(value, dict):
        return _map(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_g(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            raise FormatError(
                'could not convert argument "invalid UTF-8 in bytes, cannot convert to string" '
                "to string"
            ) from None
    if isinstance(value, datetime.datetime):
        return _timestamp(value)
    if isinstance(value, datetime.timedelta):
        return _duration(value)
    if _is_type(value):
        return cel_type_name(value)
    if value is None:
        return "null"
    raise _clause_error("s", type_name(value))


def _member(value: Any) -> str:
    """An element of a list or a map value, written as a CEL literal."""
    if isinstance(value, (list, dict, bool, str, bytes, bytearray)) or value is None:
        text = format_value(value)
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = _go_fixed6(value)
        return go_quote(text) if not math.isfinite(value) else text
    elif isinstance(value, datetime.datetime):
        return f"timestamp({go_quote(_timestamp(value))})"
    elif isinstance(value, datetime.timedelta):
        return f"duration({go_quote(_duration(value))})"
    elif _is_type(value):
        text = cel_type_name(value)
    else:
        raise FormatError(f"no formatting function for {type_name(value)}")
    if isinstance(value, str):
        return go_quote(text)
    if isinstance(value, (bytes, bytearray)):
        return "b" + go_quote(text)
    return text


def _list(values: list[Any]) -> str:
    return "[" + ", ".join(_member(v) for v in values) + "]"


def _map(values: dict[Any, Any]) -> str:
    pairs = []
    for k, v in values.items():
        if isinstance(k, (str, bool)):
            key = format_value(k)
            key = go_quote(key) if isinstance(k, str) else key
        else:
            key = str(k)
        pairs.append((key, _member(v)))
    pairs.sort(key=lambda p: p[0])
    return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"


# -- clauses ---------------------------------------------------------------------------------


def _double(verb: str, value: Any) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return float(value)
    if isinstance(value, float):
        return value
    raise _clause_error(verb, type_name(value))


def _fixed(value: Any, precision: int | None) -> str:
    x = _double("f", value)
    if not math.isfinite(x):
        return _non_finite(x)
    digits = f"{abs(x):.{6 if precision is None else precision}f}"
    whole, dot, frac = digits.partition(".")
    grouped = f"{int(whole):,}"
    return ("-" if x < 0 else "") + grouped + dot + frac


def _non_finite(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    return "∞" if x > 0 else "-∞"


def _scientific(value: Any, precision: int | None) -> str:
    x = _double("e", value)
    if math.isfinite(x):
        mant, _, exp = f"{abs(x):.6e}".partition("e")
        e = int(exp)
        sup = ("-" if e < 0 else "") + f"{abs(e):02d}"
        text = ("-" if x < 0 else "") + f"{mant}{_TIMES}10{sup.translate(_SUPERSCRIPT)}"
    else:
        text = _non_finite(x)
    width = 6 if precision is None else precision
    return text.rjust(width)


def _integer(verb: str, value: Any, spec: str, allow_bool: bool = False) -> str:
    if isinstance(value, bool):
        if allow_bool:
            return "1" if value else "0"
        raise _clause_error(verb, "bool")
    if isinstance(value, int):
        return format(value, spec)
    raise _clause_error(verb, type_name(value))


def _hex(value: Any, upper: bool) -> str:
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, (bytes, bytearray)):
        h = bytes(value).hex()
        return h.upper() if upper else h
    return _integer("X" if upper else "x", value, "X" if upper else "x")


_CLAUSES: dict[str, Callable[[Any, int | None], str]] = {
    "s": lambda v, _p: format_value(v),
    "d": lambda v, _p: _integer("d", v, "d"),
    "f": _fixed,
    "e": _scientific,
    "b": lambda v, _p: _integer("b", v, "b", allow_bool=True),
    "x": lambda v, _p: _hex(v, upper=False),
    "X": lambda v, _p: _hex(v, upper=True),
    "o": lambda v, _p: _integer("o", v, "o"),
}


class _Arguments:
    def __init__(self, args: list[Any]) -> None:
        self.args = args

    def size(self) -> int:
        return len(self.args)

    def arg(self, index: int) -> Any:
        if index >= len(self.args):
            raise FormatError(f"index {index} out of range")
        return self.args[index]

    def clause(self, verb: str, precision: int | None, value: Any) -> str:
        return _CLAUSES[verb](value, precision)


def format_string(fmt: str, args: list[Any]) -> str:
    """``fmt.format(args)``."""
    return scan(fmt, _Arguments(list(args)))
