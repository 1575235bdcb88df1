"""CEL device selectors, evaluated with a real CEL implementation plus the Kubernetes libraries.

The evaluator is ``common-expression-language`` (the ``cel`` module, a Rust CEL interpreter).
On top of its standard library this module registers the Kubernetes CEL extensions device
selectors use:

* quantity: ``quantity(s)``, ``isQuantity(s)``, ``q.sign()``, ``q.isInteger()``,
  ``q.asInteger()``, ``q.asApproximateFloat()``, ``q.add(q|int)``, ``q.sub(q|int)``,
  ``q.isLessThan(q)``, ``q.isGreaterThan(q)``, ``q.compareTo(q)``;
* semver: ``semver(s[, normalize])``, ``isSemver(s[, normalize])``, ``v.major()``,
  ``v.minor()``, ``v.patch()``, ``v.isLessThan(v)``, ``v.isGreaterThan(v)``,
  ``v.compareTo(v)``;
* the cel-go strings/lists/sets/math extensions shipped by the ``cel`` package.

Quantities and versions travel through CEL as one-key maps holding a canonical value, so ``==``
compares values (``quantity("1") == quantity("1000m")``). The ``device`` variable has
``driver``, ``attributes[domain][id]``, ``capacity[domain][id]`` (quantities) and
``allowMultipleAllocations``; looking up a domain the device does not have yields an empty map
(as the API documents), an unknown attribute is an evaluation error. Each expression is compiled
once (cached); each device's evaluation context is built once and reused.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import cel
from cel import stdlib as cel_stdlib

from kubeacc.engine.celbind import BindError, expand_bind
from kubeacc.engine.quantity import QuantityError, is_quantity, parse_quantity
from kubeacc.engine.semver import Semver, SemverError, is_semver, parse_semver

QUANTITY_KEY = "__kubeacc.io/quantity__"
SEMVER_KEY = "__kubeacc.io/semver__"

_DOMAIN_RE = re.compile(r"device\s*\.\s*(attributes|capacity)\s*\[\s*(['\"])([^'\"]+)\2\s*\]")


_PY_FAIL_RE = re.compile(
    r"Python function call failed: \w+: (.*?)(?:\. Check function arguments.*)?$"
)


class CelError(Exception):
    """Compiling or evaluating a selector failed."""


def qvalue(q: Fraction) -> dict[str, str]:
    return {QUANTITY_KEY: str(q)}


def svalue(v: Semver) -> dict[str, str]:
    return {SEMVER_KEY: str(v)}


def _q(x: Any, allow_int: bool = False) -> Fraction:
    if isinstance(x, dict) and QUANTITY_KEY in x:
        return Fraction(x[QUANTITY_KEY])
    if allow_int and isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    raise CelError(f"expected a quantity, got {x!r}")


def _s(x: Any) -> Semver:
    if isinstance(x, dict) and SEMVER_KEY in x:
        return parse_semver(x[SEMVER_KEY])
    raise CelError(f"expected a semver, got {x!r}")


def _cmp(a: Any, b: Any) -> int:
    if isinstance(a, dict) and SEMVER_KEY in a:
        return _s(a).compare(_s(b))
    qa, qb = _q(a), _q(b)
    return (qa > qb) - (qa < qb)


def _quantity(s: str) -> dict[str, str]:
    try:
        return qvalue(parse_quantity(s))
    except QuantityError as e:
        raise CelError(str(e)) from None


def _semver(s: str, normalize: bool = False) -> dict[str, str]:
    try:
        return svalue(parse_semver(s, normalize))
    except SemverError as e:
        raise CelError(str(e)) from None


def _as_integer(q: Any) -> int:
    v = _q(q)
    if v.denominator != 1 or not -(2**63) <= v < 2**63:
        raise CelError("cannot convert value to integer")
    return int(v)


def _semver_part(index: int) -> Callable[[Any], int]:
    def part(v: Any) -> int:
        s = _s(v)
        return (s.major, s.minor, s.patch)[index]

    return part


KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": is_quantity,
    "sign": lambda q: (_q(q) > 0) - (_q(q) < 0),
    "isInteger": lambda q: _q(q).denominator == 1 and -(2**63) <= _q(q) < 2**63,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_q(q)),
    "add": lambda a, b: qvalue(_q(a) + _q(b, allow_int=True)),
    "sub": lambda a, b: qvalue(_q(a) - _q(b, allow_int=True)),
    "isLessThan": lambda a, b: _cmp(a, b) < 0,
    "isGreaterThan": lambda a, b: _cmp(a, b) > 0,
    "compareTo": _cmp,
    "semver": _semver,
    "isSemver": is_semver,
    "major": _semver_part(0),
    "minor": _semver_part(1),
    "patch": _semver_part(2),
}


@lru_cache(maxsize=1)
def _base_functions() -> dict[str, Callable[..., Any]]:
    ctx = cel.Context()
    cel_stdlib.add_stdlib_to_context(ctx)
    funcs = dict(ctx.functions)
    funcs.update(KUBERNETES_FUNCTIONS)
    return funcs


def _functions_for(names: frozenset[str]) -> dict[str, Callable[..., Any]]:
    base = _base_functions()
    return {n: base[n] for n in names if n in base}


#: The binding reports a failing Python function on sys.stderr before raising; the error is
#: returned to the caller instead, so that report is swallowed.
_SINK = io.StringIO()


@dataclass(frozen=True)
class Selector:
    expression: str
    program: cel.Program
    domains: frozenset[tuple[str, str]]
    functions: frozenset[str]

    def short(self, width: int = 60) -> str:
        e = " ".join(self.expression.split())
        return e if len(e) <= width else e[: width - 3] + "..."


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compile once; raises :class:`CelError` for a syntax error."""
    try:
        program = cel.compile(expand_bind(expression))
    except BindError as e:
        raise CelError(f"compile {expression!r}: {e}") from None
    except Exception as e:  # the binding raises several exception types
        raise CelError(f"compile {expression!r}: {e}") from None
    domains = frozenset((m.group(1), m.group(3)) for m in _DOMAIN_RE.finditer(expression))
    functions = frozenset(f for f in program.functions() if f in _base_functions())
    return Selector(expression, program, domains, functions)


class DeviceEnv:
    """The reusable CEL context of one device."""

    __slots__ = ("_ctxs", "variable")

    def __init__(self, variable: dict[str, Any]) -> None:
        self.variable = variable
        self._ctxs: dict[tuple[frozenset[tuple[str, str]], frozenset[str]], cel.Context] = {}

    def _context(self, selector: Selector) -> cel.Context:
        """One context per (domains indexed, functions used): domains an expression indexes
        but the device lacks read as empty maps in that expression only, never in others."""
        key = (selector.domains, selector.functions)
        ctx = self._ctxs.get(key)
        if ctx is None:
            variable = dict(self.variable)
            for kind, domain in selector.domains:
                if domain not in variable[kind]:
                    variable[kind] = {**variable[kind], domain: {}}
            ctx = cel.Context(
                variables={"device": variable}, functions=_functions_for(selector.functions)
            )
            self._ctxs[key] = ctx
        return ctx

    def matches(self, selector: Selector) -> bool:
        ctx = self._context(selector)
        saved = sys.stderr
        sys.stderr = _SINK
        try:
            result = selector.program.execute(ctx)
        except Exception as e:
            raise CelError(f"{selector.short()}: {_clean(e)}") from None
        finally:
            sys.stderr = saved
            if _SINK.tell():
                _SINK.seek(0)
                _SINK.truncate()
        if not isinstance(result, bool):
            raise CelError(f"{selector.short()}: expression must evaluate to bool, got {result!r}")
        return result


def _clean(e: BaseException) -> str:
    msg = str(e).strip()
    if isinstance(e, KeyError):
        return f"no such key: {msg}"
    m = _PY_FAIL_RE.search(msg)
    if m:
        return m.group(1)
    return msg.splitlines()[0] if msg else type(e).__name__
