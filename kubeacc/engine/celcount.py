"""kube-scheduler's runtime CEL cost limit, counted while a device selector runs.

kube-scheduler stops a selector whose cost passes 1,000,000 units and fails the pod with a CEL
runtime error. Its units (cel-go's cost tracker with the Kubernetes libraries): an identifier,
a field select and an index 1; a call 1, or by the size of its arguments for the string and
list functions; ``&&``, ``||``, ``?:``, constants and presence tests 0; a list literal 10 and
a map literal 30, unless all of its parts are constants (then 0); ``lists.range(n)`` 11 + n.

The evaluator counts nothing, so the checked expression (serialized ``cel.expr.CheckedExpr``)
is rewritten at the wire level into one that counts. Its nodes fall into regions that run as a
unit: the whole expression, a comprehension's loop condition, its step, and each side of a
short-circuit (the right side of ``&&``/``||``, a branch of ``?:``). A region's static cost
(its nodes, without the regions nested in it) is charged when it runs, by a wrapper that
returns the region's value: ``kubeacc_cost(k, x)``. Costs that depend on values are charged
by ``kubeacc_costLen(k, xs)`` (``k + size(xs)``: ``lists.range`` of a computed n, the list of
an ``in``). A comprehension whose condition is the constant ``true`` (``map``, ``filter``...)
cannot stop early: its range goes through ``kubeacc_costRange``, which refuses at once when
the iterations alone would pass the limit.

Past the limit a wrapper raises, which the evaluator turns into an error value; an error as a
loop condition ends the comprehension and the counter stays over the limit, so every enclosing
loop stops too, and :func:`evaluate` reports the cost-limit error whatever value came out
(``error || true`` is ``true`` in CEL).

Only expressions that can come near the limit are rewritten (:func:`worst_case`); the others
run as compiled. Where the count is not exact (docs/placement.md, "Runtime cost limit") it
over-charges, except for strings read from devices: their size-dependent calls are charged as
for strings of up to 10 characters.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from cel_expr_python import cel

from kubeacc.engine.celcheck import fields

#: kube-scheduler's ``CELSelectorExpressionMaxCost``
MAX_COST = 1_000_000
#: the evaluator stops every evaluation after this many comprehension iterations in all
ITERATION_CAP = 10_000
COST = "kubeacc_cost"
COST_LEN = "kubeacc_costLen"
COST_RANGE = "kubeacc_costRange"
#: cel-go's words, which kube-scheduler reports as the selector's CEL runtime error
LIMIT_MESSAGE = "operation cancelled: actual cost limit exceeded"
ITERATION_MESSAGE = (
    f"the evaluator stops after {ITERATION_CAP:,} comprehension iterations per evaluation "
    f"(a limit of kube-acc's CEL implementation, not of kube-scheduler, which allows loops "
    f"up to its cost limit of {MAX_COST:,})"
)

_CONST, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 3, 4, 5, 6, 7, 8, 9
_EXPR_ID = 2
#: Comprehension fields
_RANGE, _INIT, _CONDITION, _STEP, _RESULT = 2, 4, 5, 6, 7
#: CheckedExpr fields
_TYPE_MAP, _ROOT = 3, 4

_state = threading.local()


class CostLimitExceeded(Exception):
    """The selector passed kube-scheduler's runtime cost limit."""


def _spent() -> int:
    cost: int = getattr(_state, "cost", 0)
    return cost


def _add(k: int) -> None:
    _state.cost = _spent() + k
    if _state.cost > MAX_COST:
        raise CostLimitExceeded(LIMIT_MESSAGE)


def _cost_impl(k: int, x: Any) -> Any:
    _add(k)
    return x


def _len_impl(k: int, xs: Any) -> Any:
    _add(k + len(xs))
    return xs


def _range_impl(k: int, strict: bool, xs: Any) -> Any:
    """A comprehension that cannot stop early costs at least ``k`` per element: decide at
    once (a check, not a charge: the iterations charge themselves)."""
    if strict and _spent() + len(xs) * k > MAX_COST:
        _state.cost = MAX_COST + 1
        raise CostLimitExceeded(LIMIT_MESSAGE)
    return xs


_T = cel.Type
#: the value types a region may have, by the checker's type: primitive kinds, lists, maps
_KINDS: dict[tuple[int, int], Any] = {
    (3, 1): _T.BOOL,
    (3, 2): _T.INT,
    (3, 3): _T.UINT,
    (3, 4): _T.DOUBLE,
    (3, 5): _T.STRING,
    (3, 6): _T.BYTES,
    (6, 0): _T.List(_T.DYN),
    (7, 0): _T.Map(_T.DYN, _T.DYN),
}
_LIST_T, _MAP_T = _KINDS[(6, 0)], _KINDS[(7, 0)]


def declarations() -> list[Any]:
    """The counting functions (one overload per value kind: a ``dyn`` parameter matches
    none at run time)."""
    cost = [
        cel.Overload(f"kubeacc_cost_{i}", t, [_T.INT, t], impl=_cost_impl)
        for i, t in enumerate(_KINDS.values())
    ]
    length = [
        cel.Overload(f"kubeacc_cost_len_{i}", t, [_T.INT, t], impl=_len_impl)
        for i, t in enumerate((_LIST_T, _MAP_T))
    ]
    ranges = [
        cel.Overload(f"kubeacc_cost_range_{i}", t, [_T.INT, _T.BOOL, t], impl=_range_impl)
        for i, t in enumerate((_LIST_T, _MAP_T))
    ]
    return [
        cel.FunctionDecl(COST, cost),
        cel.FunctionDecl(COST_LEN, length),
        cel.FunctionDecl(COST_RANGE, ranges),
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
    return _field(_EXPR_ID, eid) + _field(_CONST, _field(3, v))


def _const_bool(eid: int, v: bool) -> bytes:
    return _field(_EXPR_ID, eid) + _field(_CONST, _field(2, int(v)))


def _call(eid: int, fn: str, args: list[bytes]) -> bytes:
    body = _field(2, fn.encode()) + b"".join(_field(3, a) for a in args)
    return _field(_EXPR_ID, eid) + _field(_CALL, body)


# -- reading ---------------------------------------------------------------------------------


class _Node:
    """One Expr: its id, kind and the kind's fields."""

    __slots__ = ("eid", "kind", "parts")

    def __init__(self, expr: bytes) -> None:
        self.eid = 0
        self.kind = 0
        self.parts: list[tuple[int, int | bytes]] = []
        for num, v in fields(expr):
            if num == _EXPR_ID and isinstance(v, int):
                self.eid = v
            elif isinstance(v, bytes):
                self.kind = num
                self.parts = list(fields(v))

    def get(self, num: int) -> bytes:
        return next((v for n, v in self.parts if n == num and isinstance(v, bytes)), b"")

    def all(self, num: int) -> list[bytes]:
        return [v for n, v in self.parts if n == num and isinstance(v, bytes)]

    @property
    def function(self) -> str:
        return self.get(2).decode() if self.kind == _CALL else ""

    def operands(self) -> list[bytes]:
        """A call's target (if any) and arguments, in cel-go's order."""
        return self.all(1) + self.all(3)


def _constant(expr: bytes) -> tuple[int, int | bytes] | None:
    """(Constant field, value) of a constant expression."""
    node = _Node(expr)
    if node.kind != _CONST:
        return None
    return node.parts[0] if node.parts else (1, 0)


def _literal_size(expr: bytes) -> int | None:
    """Size of a literal string (code points) or list, as cel-go's ``actualSize``."""
    const = _constant(expr)
    if const is not None:
        num, v = const
        if num == 6 and isinstance(v, bytes):
            return len(v.decode())
        if num == 7 and isinstance(v, bytes):
            return len(v)
        return 1
    node = _Node(expr)
    if node.kind == _LIST:
        return len(node.all(1))
    return None


def _is_attribute(expr: bytes) -> bool:
    """cel-go plans identifiers, selects and indexes on them as one attribute."""
    node = _Node(expr)
    if node.kind == _IDENT:
        return True
    if node.kind == _SELECT:
        return (3, 1) not in node.parts and _is_attribute(node.get(1))
    if node.kind == _CALL and node.function in ("_[_]", "_[?_]"):
        return _is_attribute(node.operands()[0])
    return False


def _all_constant(exprs: list[bytes]) -> bool:
    return all(_constant(e) is not None for e in exprs)


def _tenth(n: int) -> int:
    return math.ceil(n * 0.1)


#: size-dependent calls of cel-go and the Kubernetes libraries: cost by operand sizes
#: (unknown sizes count as 1..10 characters, which costs 1 a factor)
def _size_cost(fn: str, sizes: list[int | None]) -> int:
    def f(i: int, factor: float = 0.1, plus: int = 0) -> int:
        s = sizes[i] if i < len(sizes) else None
        return 1 if s is None else math.ceil((s + plus) * factor)

    if fn in ("_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"):
        known = [s for s in sizes if s is not None]
        if len(known) == 2 or 0 in known:
            return _tenth(min(known))
        return 1
    if fn == "_+_":
        if all(s is not None for s in sizes):
            return _tenth(sum(s for s in sizes if s is not None))
        return max([1, *(_tenth(s) for s in sizes if s is not None)])
    if fn == "contains":
        return f(0) * f(1)
    if fn in ("startsWith", "endsWith"):
        return f(1)
    if fn in ("matches", "find", "findAll"):
        return f(0, plus=1) * f(1, factor=0.25)
    if fn in ("lowerAscii", "upperAscii", "trim", "substring", "url", "strings.quote"):
        return f(0)
    if fn in ("replace", "split"):
        return f(0, factor=0.2)
    return 1


_LOGICAL = ("_&&_", "_||_")
_STRING_SIZED = {"contains", "startsWith", "endsWith", "matches", "find", "findAll"}


class _Rewriter:
    """Rewrites an expression into one that counts (:func:`rewrite`), or only measures its
    worst case (``measure``: every range at its bound, no short-circuit)."""

    def __init__(self, types: dict[int, bytes], next_id: int) -> None:
        self.types = types
        self.next_id = next_id
        self.loops = 0

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def kind(self, expr: bytes) -> Any:
        t = self.types.get(_Node(expr).eid)
        if t is None:
            return None
        for num, v in fields(t):
            return _KINDS.get((num, v if isinstance(v, int) and num == 3 else 0))
        return None

    def charge(self, k: int, expr: bytes) -> bytes | None:
        """``expr`` wrapped to charge ``k`` when it runs; None when its type cannot be."""
        if k == 0:
            return expr
        if self.kind(expr) is None:
            return None
        return _call(self.new_id(), COST, [_const_int(self.new_id(), k), expr])

    def region(self, expr: bytes) -> tuple[bytes, int]:
        """(rewritten expression, static cost of its own region)."""
        node = _Node(expr)
        if node.kind in (_CONST, 0):
            return expr, 0
        if node.kind == _IDENT:
            return expr, 1
        if node.kind == _SELECT:
            operand, cost = self.region(node.get(1))
            own = 0 if (3, 1) in node.parts else 1
            return self.rebuild(node, {1: [operand]}), cost + own
        if node.kind == _CALL:
            return self.call(node)
        if node.kind == _LIST:
            elems = node.all(1)
            out = [self.region(e) for e in elems]
            own = 0 if _all_constant(elems) else 10
            return self.rebuild(node, {1: [e for e, _ in out]}), own + sum(c for _, c in out)
        if node.kind == _STRUCT:
            return self.struct(node)
        if node.kind == _COMPREHENSION:
            return self.comprehension(node)
        return expr, 1

    def call(self, node: _Node) -> tuple[bytes, int]:
        fn = node.function
        ops = node.operands()
        n_target = len(node.all(1))
        if fn in _LOGICAL:
            left, cl = self.region(ops[0])
            right, cr = self.region(ops[1])
            wrapped = self.charge(cr, right)
            if wrapped is None:
                return self.rebuild_call(node, [left, right], n_target), cl + cr
            return self.rebuild_call(node, [left, wrapped], n_target), cl
        if fn == "_?_:_":
            cond, cc = self.region(ops[0])
            branches, static = [], 0
            for b in ops[1:]:
                rb, cb = self.region(b)
                if _is_attribute(b):
                    cb -= 1  # its identifier is resolved unobserved in cel-go
                wrapped = self.charge(cb, rb)
                if wrapped is None:
                    static = max(static, cb)
                    wrapped = rb
                branches.append(wrapped)
            return self.rebuild_call(node, [cond, *branches], n_target), cc + static
        out = [self.region(e) for e in ops]
        args = [e for e, _ in out]
        cost = sum(c for _, c in out)
        if fn == "lists.range" and len(ops) == 1:
            const = _constant(ops[0])
            if const is not None and isinstance(const[1], int):
                return self.rebuild_call(node, args, n_target), cost + 11 + const[1]
            inner = self.rebuild_call(node, args, n_target)
            return _call(self.new_id(), COST_LEN, [_const_int(self.new_id(), 11), inner]), cost
        if fn == "@in" and len(ops) == 2:
            elems = _Node(ops[1]).all(1) if _Node(ops[1]).kind == _LIST else None
            if elems is not None and _all_constant(elems):
                return self.rebuild_call(node, args, n_target), cost  # a set lookup in cel-go
            if elems is not None:
                return self.rebuild_call(node, args, n_target), cost + len(elems)
            if self.kind(ops[1]) is _LIST_T:
                counted = _call(self.new_id(), COST_LEN, [_const_int(self.new_id(), 0), args[1]])
                return self.rebuild_call(node, [args[0], counted], n_target), cost
            return self.rebuild_call(node, args, n_target), cost + 1
        sizes = [_literal_size(e) for e in ops]
        lists = any(_Node(e).kind == _LIST for e in ops)
        own = _size_cost(fn, sizes) if fn in _SIZED and not (fn == "_+_" and lists) else 1
        return self.rebuild_call(node, args, n_target), cost + own

    def struct(self, node: _Node) -> tuple[bytes, int]:
        entries, cost, parts = [], 0, []
        for entry in node.all(2):
            out = bytearray()
            for n, v in fields(entry):
                if n in (3, 4) and isinstance(v, bytes):
                    parts.append(v)
                    e, c = self.region(v)
                    cost += c
                    out += _field(n, e)
                else:
                    out += _field(n, v)
            entries.append(bytes(out))
        own = 0 if _all_constant(parts) else 30
        return self.rebuild(node, {2: entries}), cost + own

    def comprehension(self, node: _Node) -> tuple[bytes, int]:
        self.loops += 1
        rng, c_range = self.region(node.get(_RANGE))
        init, c_init = self.region(node.get(_INIT))
        result, c_result = self.region(node.get(_RESULT))
        cond, k_cond = self.region(node.get(_CONDITION))
        step, k_step = self.region(node.get(_STEP))
        wrapped_step = self.charge(k_step, step)
        if wrapped_step is None:  # charged with the condition: over by one step at the end
            wrapped_step, k_cond = step, k_cond + k_step
        strict = _constant(node.get(_CONDITION)) == (2, 1)
        ranged = _call(
            self.new_id(),
            COST_RANGE,
            [
                _const_int(self.new_id(), k_cond + k_step),
                _const_bool(self.new_id(), strict),
                rng,
            ],
        )
        counted = _call(self.new_id(), COST, [_const_int(self.new_id(), k_cond), cond])
        new = {_RANGE: [ranged], _INIT: [init], _CONDITION: [counted], _STEP: [wrapped_step]}
        new[_RESULT] = [result]
        return self.rebuild(node, new), c_range + c_init + c_result

    def rebuild(self, node: _Node, new: dict[int, list[bytes]]) -> bytes:
        """The node with the listed fields replaced, in their order."""
        pending = {n: list(v) for n, v in new.items()}
        out = bytearray()
        for n, v in node.parts:
            if n in pending and isinstance(v, bytes):
                out += _field(n, pending[n].pop(0))
            else:
                out += _field(n, v)
        return _field(_EXPR_ID, node.eid) + _field(node.kind, bytes(out))

    def rebuild_call(self, node: _Node, ops: list[bytes], n_target: int) -> bytes:
        return self.rebuild(node, {1: ops[:n_target], 3: ops[n_target:]})


_SIZED = {
    "_==_",
    "_!=_",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_+_",
    "lowerAscii",
    "upperAscii",
    "trim",
    "substring",
    "url",
    "strings.quote",
    "replace",
    "split",
} | _STRING_SIZED


#: elements a comprehension over device data can have (the API's bound on a device's
#: attributes and capacities)
DEVICE_BOUND = 32
#: below this worst case an expression is not rewritten: it cannot reach the limit, and
#: counting costs about 1.3 us per charge
COUNT_ABOVE = MAX_COST // 10


def worst_case(expr: bytes) -> int | None:
    """An upper bound of the cost (every range at its bound, nothing short-circuited, unknown
    sizes at 1), or None when a range's size is unknown."""
    node = _Node(expr)
    if node.kind == _COMPREHENSION:
        bound = _range_bound(node.get(_RANGE))
        if bound is None:
            return None
        parts = [worst_case(node.get(n)) for n in (_RANGE, _INIT, _RESULT, _CONDITION, _STEP)]
        if any(p is None for p in parts):
            return None
        rng, init, result, cond, step = (p or 0 for p in parts)
        return rng + init + result + bound * (cond + step)
    if node.kind == _CALL and node.function == "lists.range":
        const = _constant(node.operands()[0]) if node.operands() else None
        if const is None or not isinstance(const[1], int):
            return None
        return 11 + const[1]
    total = {_CONST: 0, _LIST: 10, _STRUCT: 30}.get(node.kind, 1)
    subs: list[bytes] = []
    if node.kind == _SELECT:
        subs = [node.get(1)]
    elif node.kind == _CALL:
        subs = node.operands()
        if node.function == "@in":
            total = DEVICE_BOUND
    elif node.kind == _LIST:
        subs = node.all(1)
    elif node.kind == _STRUCT:
        subs = [
            v for e in node.all(2) for n, v in fields(e) if n in (3, 4) and isinstance(v, bytes)
        ]
    for sub in subs:
        w = worst_case(sub)
        if w is None:
            return None
        total += w
    return total


def _range_bound(expr: bytes) -> int | None:
    """Elements a range can have: ``lists.range(n)`` with a literal n, a list literal, or a
    read rooted at ``device``; None when unknown."""
    node = _Node(expr)
    if node.kind == _LIST:
        return len(node.all(1))
    if node.kind == _CALL and node.function == "lists.range":
        const = _constant(node.operands()[0]) if node.operands() else None
        return const[1] if const is not None and isinstance(const[1], int) else None
    return DEVICE_BOUND if _rooted_at_device(expr) else None


def _rooted_at_device(expr: bytes) -> bool:
    node = _Node(expr)
    if node.kind == _IDENT:
        return node.get(1) == b"device"
    if node.kind == _SELECT:
        return _rooted_at_device(node.get(1))
    if node.kind == _CALL and node.function in ("_[_]", "_[?_]"):
        return _rooted_at_device(node.operands()[0])
    return False


def _type_map(checked: bytes) -> dict[int, bytes]:
    types: dict[int, bytes] = {}
    for num, v in fields(checked):
        if num == _TYPE_MAP and isinstance(v, bytes):
            entry = dict(fields(v))
            key, val = entry.get(1), entry.get(2)
            if isinstance(key, int) and isinstance(val, bytes):
                types[key] = val
    return types


def rewrite(serialized: bytes, always: bool = False) -> tuple[bytes, int, int]:
    """(rewritten serialized expression, static cost of the root region, comprehensions); the
    expression unchanged and 0 comprehensions when its worst case is far from the limit
    (unless ``always``)."""
    any_parts = list(fields(serialized))
    checked = next(v for n, v in any_parts if n == 2 and isinstance(v, bytes))
    root = next(v for n, v in fields(checked) if n == _ROOT and isinstance(v, bytes))
    worst = worst_case(root)
    if not always and worst is not None and worst <= COUNT_ABOVE:
        return serialized, 0, 0
    rw = _Rewriter(_type_map(checked), 1 << 40)
    new_root, outside = rw.region(root)
    new_checked = b"".join(_field(n, new_root if n == _ROOT else v) for n, v in fields(checked))
    out = b"".join(_field(n, new_checked if n == 2 else v) for n, v in any_parts)
    return out, outside, rw.loops


def evaluate(program: Any, activation: Any, outside: int) -> tuple[Any, int]:
    """Evaluate a rewritten program, the root region's ``outside`` cost charged first;
    raises :class:`CostLimitExceeded`. Returns (result, counted cost)."""
    _state.cost = 0
    try:
        _add(outside)
        result = program.eval(activation)
    except RuntimeError as e:
        raise CostLimitExceeded(ITERATION_MESSAGE) if is_iteration_cap(e) else e from None
    finally:
        spent = _spent()
        _state.cost = 0
    if spent > MAX_COST:
        raise CostLimitExceeded(LIMIT_MESSAGE)
    return result, spent


def is_iteration_cap(error: object) -> bool:
    """Whether an evaluation error is the evaluator's own iteration cap."""
    return "Iteration budget exceeded" in str(error)
