"""Spike (issue 27): count kube-scheduler's runtime CEL cost inside the evaluation.

The checked expression (serialized ``cel.expr.CheckedExpr``) is rewritten at the wire level:
each comprehension's loop condition ``c`` becomes ``kubeacc_cost(k, c)`` where ``k`` is the
static cost of one iteration (condition + step), and its range ``r`` becomes
``kubeacc_costRange(k, strict, r)``. ``kubeacc_cost`` adds ``k`` to a per-evaluation counter
and returns ``c``; past :data:`MAX_COST` it raises, which the evaluator turns into an error
value: a loop condition that is an error ends the comprehension. The counter stays over the
limit, so every later loop stops too, and :func:`evaluate` reports the cost-limit error
whatever value the expression produced (errors are absorbed by ``||``/``&&``).
"""

from __future__ import annotations

import threading
from typing import Any

from cel_expr_python import cel

from kubeacc.engine.celcheck import _children, fields

MAX_COST = 1_000_000
#: the evaluator stops every evaluation after this many comprehension iterations in all
ITERATION_CAP = 10_000
COST = "kubeacc_cost"
COST_RANGE = "kubeacc_costRange"
LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"

_IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 4, 5, 6, 7, 8, 9
_LOOP_CONDITION, _RANGE = 5, 2

_state = threading.local()


class CostLimitExceeded(Exception):
    pass


def _spent() -> int:
    return getattr(_state, "cost", 0)


def _add(k: int) -> None:
    _state.cost = _spent() + k
    if _state.cost > MAX_COST:
        raise CostLimitExceeded(LIMIT_MESSAGE)


def _cost_impl(k: int, cond: Any) -> Any:
    _add(k)
    return cond


def _range_impl(k: int, strict: bool, xs: Any) -> Any:
    """A comprehension that cannot stop early costs ``k`` per element: decide at once."""
    if strict:
        n = len(xs)
        if _spent() + n * k > MAX_COST:
            _state.cost = MAX_COST + 1
            raise CostLimitExceeded(LIMIT_MESSAGE)
    return xs


def declarations() -> list[Any]:
    T = cel.Type
    return [
        cel.FunctionDecl(
            COST, [cel.Overload("kubeacc_cost_bool", T.BOOL, [T.INT, T.BOOL], impl=_cost_impl)]
        ),
        cel.FunctionDecl(
            COST_RANGE,
            [
                cel.Overload(
                    "kubeacc_cost_range_list",
                    T.List(T.DYN),
                    [T.INT, T.BOOL, T.List(T.DYN)],
                    impl=_range_impl,
                ),
                cel.Overload(
                    "kubeacc_cost_range_map",
                    T.Map(T.DYN, T.DYN),
                    [T.INT, T.BOOL, T.Map(T.DYN, T.DYN)],
                    impl=_range_impl,
                ),
            ],
        ),
    ]


# -- wire encoding ---------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, v: int | bytes) -> bytes:
    if isinstance(v, bytes):
        return _varint(num << 3 | 2) + _varint(len(v)) + v
    return _varint(num << 3) + _varint(v)


def _const_int(eid: int, v: int) -> bytes:
    return _field(2, eid) + _field(3, _field(3, v))


def _const_bool(eid: int, v: bool) -> bytes:
    return _field(2, eid) + _field(3, _field(2, int(v)))


def _call(eid: int, fn: str, args: list[bytes]) -> bytes:
    return _field(2, eid) + _field(6, _field(2, fn.encode()) + b"".join(_field(3, a) for a in args))


# -- static cost of one evaluation of an expression (cel-go's units, no short-circuit) -------


def static_cost(expr: bytes) -> int:
    """Identifiers, selects and calls 1, list and map literals 10, constants 0; a nested
    comprehension counts its range, initial accumulator and result only (its loop counts
    itself at run time)."""
    total = 0
    for kind, msg in _children(expr):
        if kind in (_IDENT, _SELECT, _CALL):
            total += 1
        elif kind in (_LIST, _STRUCT):
            total += 10
        if kind == _COMPREHENSION:
            for n, v in fields(msg):
                if n in (2, 4, 7) and isinstance(v, bytes):
                    total += static_cost(v)
            continue
        for n, v in fields(msg):
            if isinstance(v, bytes) and n not in _STRINGS.get(kind, ()):
                if kind == _STRUCT and n == 2:  # entries: key 3 / value 4 (map), value 3 (field)
                    for n2, v2 in fields(v):
                        if n2 in (3, 4) and isinstance(v2, bytes):
                            total += static_cost(v2)
                elif kind in (_SELECT, _CALL, _LIST):
                    total += static_cost(v)
    return total


_STRINGS = {_SELECT: {2}, _CALL: {2}, _IDENT: {1}, _STRUCT: {1}}


def _is_true(expr: bytes) -> bool:
    for kind, msg in _children(expr):
        return kind == 3 and (2, 1) in fields(msg)
    return False


class _Rewriter:
    def __init__(self, next_id: int) -> None:
        self.next_id = next_id
        self.loops = 0

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def expr(self, expr: bytes) -> bytes:
        out = bytearray()
        for num, v in fields(expr):
            if num == _COMPREHENSION and isinstance(v, bytes):
                out += _field(num, self.comprehension(v))
            elif num in (_SELECT, _CALL, _LIST, _STRUCT) and isinstance(v, bytes):
                out += _field(num, self.message(num, v))
            else:
                out += _field(num, v)
        return bytes(out)

    def message(self, kind: int, msg: bytes) -> bytes:
        out = bytearray()
        for n, v in fields(msg):
            if isinstance(v, bytes) and n not in _STRINGS.get(kind, ()):
                if kind == _STRUCT and n == 2:
                    entry = bytearray()
                    for n2, v2 in fields(v):
                        entry += _field(
                            n2, self.expr(v2) if n2 in (3, 4) and isinstance(v2, bytes) else v2
                        )
                    out += _field(n, bytes(entry))
                else:
                    out += _field(n, self.expr(v))
            else:
                out += _field(n, v)
        return bytes(out)

    def comprehension(self, msg: bytes) -> bytes:
        self.loops += 1
        parts = list(fields(msg))
        cond = next(v for n, v in parts if n == 5 and isinstance(v, bytes))
        step = next(v for n, v in parts if n == 6 and isinstance(v, bytes))
        per_iteration = static_cost(cond) + static_cost(step)
        strict = _is_true(cond)
        out = bytearray()
        for n, v in parts:
            if n == _RANGE and isinstance(v, bytes):
                args = [
                    _const_int(self.new_id(), per_iteration),
                    _const_bool(self.new_id(), strict),
                    self.expr(v),
                ]
                out += _field(n, _call(self.new_id(), COST_RANGE, args))
            elif n == _LOOP_CONDITION and isinstance(v, bytes):
                args = [_const_int(self.new_id(), per_iteration), self.expr(v)]
                out += _field(n, _call(self.new_id(), COST, args))
            elif isinstance(v, bytes) and n in (4, 6, 7):
                out += _field(n, self.expr(v))
            else:
                out += _field(n, v)
        return bytes(out)


#: elements a comprehension over device data can have (the API's bound on a device's
#: attributes and capacities; attribute values are scalars)
DEVICE_BOUND = 32
#: below this worst case (every range at its bound, no short-circuit) an expression is not
#: rewritten: it cannot reach the limit, and counting costs about 1.3 us per iteration
COUNT_ABOVE = MAX_COST // 10


def _range_bound(expr: bytes) -> int | None:
    """Elements a range can have: ``lists.range(n)`` with a literal n, or a read rooted at
    ``device``; None when unknown."""
    for kind, msg in _children(expr):
        if kind == _CALL:
            parts = list(fields(msg))
            fn = next((v for n, v in parts if n == 2), b"")
            args = [v for n, v in parts if n == 3 and isinstance(v, bytes)]
            if fn == b"lists.range" and len(args) == 1:
                for akind, amsg in _children(args[0]):
                    if akind == 3:
                        for n, v in fields(amsg):
                            if n == 3 and isinstance(v, int):
                                return v
                return None
            if fn in (b"_[_]", b"_[?_]") and args:
                return DEVICE_BOUND if _rooted_at_device(args[0]) else None
            return None
        if kind == _SELECT:
            return DEVICE_BOUND if _rooted_at_device(expr) else None
        return None
    return None


def _rooted_at_device(expr: bytes) -> bool:
    for kind, msg in _children(expr):
        if kind == _IDENT:
            return (1, b"device") in fields(msg)
        if kind == _SELECT:
            operand = next((v for n, v in fields(msg) if n == 1 and isinstance(v, bytes)), b"")
            return _rooted_at_device(operand)
        if kind == _CALL:
            parts = list(fields(msg))
            args = [v for n, v in parts if n == 3 and isinstance(v, bytes)]
            return (2, b"_[_]") in parts and bool(args) and _rooted_at_device(args[0])
    return False


def worst_case(expr: bytes) -> int | None:
    """An upper bound of the loops' cost (every range at its bound, nothing short-circuited),
    or None when a range's size is unknown."""
    total = 0
    for kind, msg in _children(expr):
        if kind == _COMPREHENSION:
            parts = {n: v for n, v in fields(msg) if isinstance(v, bytes)}
            bound = _range_bound(parts.get(2, b""))
            if bound is None:
                return None
            inner = static_cost(parts.get(5, b"")) + static_cost(parts.get(6, b""))
            for n in (5, 6):
                nested = worst_case(parts.get(n, b""))
                if nested is None:
                    return None
                inner += nested
            outer = 0
            for n in (2, 4, 7):
                nested = worst_case(parts.get(n, b""))
                if nested is None:
                    return None
                outer += nested
            total += bound * inner + outer
            continue
        for n, v in fields(msg):
            if not isinstance(v, bytes) or n in _STRINGS.get(kind, ()):
                continue
            subs = [v]
            if kind == _STRUCT and n == 2:
                subs = [v2 for n2, v2 in fields(v) if n2 in (3, 4) and isinstance(v2, bytes)]
            elif kind not in (_SELECT, _CALL, _LIST):
                continue
            for sub in subs:
                nested = worst_case(sub)
                if nested is None:
                    return None
                total += nested
    return total


def rewrite(serialized: bytes) -> tuple[bytes, int, int]:
    """(rewritten serialized expression, static cost outside loops, comprehensions)."""
    any_parts = list(fields(serialized))
    checked = next(v for n, v in any_parts if n == 2 and isinstance(v, bytes))
    root = next(v for n, v in fields(checked) if n == 4 and isinstance(v, bytes))
    worst = worst_case(root)
    if worst is not None and worst <= COUNT_ABOVE:
        return serialized, static_cost(root), 0
    rw = _Rewriter(10_000_000)
    new_root = rw.expr(root)
    outside = static_cost(root)
    new_checked = b"".join(_field(n, new_root if n == 4 else v) for n, v in fields(checked))
    out = b"".join(_field(n, new_checked if n == 2 else v) for n, v in any_parts)
    return out, outside, rw.loops


def evaluate(program: Any, activation: Any, outside: int) -> tuple[Any, int]:
    """Evaluate; raises :class:`CostLimitExceeded` when the counted cost passes the limit.
    Returns (result, counted cost)."""
    _state.cost = outside
    try:
        result = program.eval(activation)
    except RuntimeError as e:
        if "Iteration budget exceeded" in str(e):
            raise CostLimitExceeded(f"{LIMIT_MESSAGE} (iteration cap)") from None
        raise
    if _state.cost > MAX_COST:
        raise CostLimitExceeded(LIMIT_MESSAGE)
    return result, _state.cost
