"""An approximation of the runtime cost limit kube-scheduler puts on a device selector.

kube-scheduler stops a selector once its cost passes ``CELSelectorExpressionMaxCost``
(1,000,000 units; roughly one unit per evaluated step, and per element a list operation
touches). This implementation tracks no cost, so the engine estimates it before running:
the iterations of comprehensions whose range is a ``lists.range(n)`` call with a literal
``n`` multiply down the nesting, and an expression whose iteration count alone exceeds the
limit is refused as kube-scheduler refuses it at run time. Comprehensions over device data
are bounded by the API's limits on a device (at most 32 attributes and capacities) and are
not counted.
"""

from __future__ import annotations

from kubeacc.engine.celcheck import _children, fields

MAX_COST = 1_000_000

_EXPR_CONST, _EXPR_CALL, _EXPR_COMPREHENSION = 3, 6, 9
_CONST_INT = 3


class CostLimitError(ValueError):
    pass


def _range_size(expr: bytes) -> int:
    """n for ``lists.range(n)`` with a literal n; 1 for anything else."""
    for kind, msg in _children(expr):
        if kind != _EXPR_CALL:
            return 1
        function = b""
        args: list[bytes] = []
        for n, v in fields(msg):
            if n == 2 and isinstance(v, bytes):
                function = v
            elif n == 3 and isinstance(v, bytes):
                args.append(v)
        if function != b"lists.range" or len(args) != 1:
            return 1
        for akind, amsg in _children(args[0]):
            if akind == _EXPR_CONST:
                for n, v in fields(amsg):
                    if n == _CONST_INT and isinstance(v, int):
                        return max(v, 1)
    return 1


def _cost(expr: bytes) -> int:
    total = 1
    for kind, msg in _children(expr):
        if kind == _EXPR_COMPREHENSION:
            size = 1
            inner = 0
            for n, v in fields(msg):
                if not isinstance(v, bytes) or n in (1, 3, 8):
                    continue
                if n == 2:
                    size = _range_size(v)
                    inner += _cost(v)
                elif n in (5, 6):
                    inner += size * _cost(v)
                else:
                    inner += _cost(v)
            total += inner
        else:
            for _, v in fields(msg):
                if isinstance(v, bytes) and len(v) > 1:
                    try:
                        total += _cost(v) if _is_expr(v) else 0
                    except (ValueError, IndexError):
                        continue
    return total


def _is_expr(buf: bytes) -> bool:
    first = next(iter(fields(buf)), None)
    return first is not None and first[0] == 2 and isinstance(first[1], int)


def check_cost(serialized: bytes) -> None:
    checked = serialized
    for num, v in fields(serialized):
        if num == 2 and isinstance(v, bytes):
            checked = v
    for num, v in fields(checked):
        if num == 4 and isinstance(v, bytes):
            cost = _cost(v)
            if cost > MAX_COST:
                raise CostLimitError(
                    f"operation cancelled: actual cost limit exceeded (estimated {cost} "
                    f"> {MAX_COST})"
                )
