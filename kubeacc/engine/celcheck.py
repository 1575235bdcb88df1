"""Compile-time checks kube-scheduler's CEL environment makes that the checker here lacks.

The Kubernetes base environment enables homogeneous aggregate literals: a list literal whose
elements, or a map literal whose keys or values, have different static types (``dyn`` mixes
with anything) is a compile error. The checked expression comes back from the
implementation as serialized ``cel.expr.CheckedExpr``; this module reads the few fields it
needs straight from the protobuf wire format (expression tree and type map), so no generated
code is needed.
"""

from __future__ import annotations

from collections.abc import Iterator

# field numbers of cel.expr.CheckedExpr, Expr and friends (cel-spec checked.proto/syntax.proto)
_CHECKED_TYPE_MAP, _CHECKED_EXPR = 3, 4
_EXPR_ID = 2
_EXPR_IDENT = 4
_EXPR_SELECT, _EXPR_CALL, _EXPR_LIST, _EXPR_STRUCT, _EXPR_COMPREHENSION = 5, 6, 7, 8, 9
_TYPE_DYN = 1


class LiteralTypeError(ValueError):
    pass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of one message: ints for varints, bytes for the rest."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
            yield num, v
        elif wire == 2:
            n, i = _varint(buf, i)
            yield num, buf[i : i + n]
            i += n
        elif wire == 1:
            yield num, buf[i : i + 8]
            i += 8
        elif wire == 5:
            yield num, buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _unwrap_any(buf: bytes) -> bytes:
    for num, v in fields(buf):
        if num == 2 and isinstance(v, bytes):
            return v
    return buf


def _expr_id(expr: bytes) -> int:
    for num, v in fields(expr):
        if num == _EXPR_ID and isinstance(v, int):
            return v
    return 0


def _children(expr: bytes) -> Iterator[tuple[int, bytes]]:
    """(kind, sub-message) of an Expr: the kind's own message."""
    for num, v in fields(expr):
        if num != _EXPR_ID and isinstance(v, bytes):
            yield num, v


def check_homogeneous(serialized: bytes) -> None:
    """Raise :class:`LiteralTypeError` for a mixed-type list or map literal."""
    checked = _unwrap_any(serialized)
    types: dict[int, bytes] = {}
    root = b""
    for num, v in fields(checked):
        if num == _CHECKED_TYPE_MAP and isinstance(v, bytes):
            key, val = 0, b""
            for n2, v2 in fields(v):
                if n2 == 1 and isinstance(v2, int):
                    key = v2
                elif n2 == 2 and isinstance(v2, bytes):
                    val = v2
            types[key] = val
        elif num == _CHECKED_EXPR and isinstance(v, bytes):
            root = v
    _walk(root, types)


#: the static type kube-scheduler gives an attribute value (``any``), which a literal mixes
#: with nothing else; here ``device`` is a map of ``dyn``, so attribute reads are told apart
#: by their shape
_ANY = b"any"


def _static(types: dict[int, bytes], expr: bytes) -> bytes | None:
    t = types.get(_expr_id(expr))
    if t is None:
        return None
    if any(num == _TYPE_DYN for num, _ in fields(t)):
        return _ANY if _reads_attribute(expr) else None
    return t


def _reads_attribute(expr: bytes) -> bool:
    """A field or index read whose root is ``device.attributes`` or a variable (a
    ``cel.bind`` of an attribute domain); capacity reads are quantities, ``device.driver`` a
    string, so neither counts."""
    path: list[bytes] = []
    node = expr
    while True:
        kids = dict(_children(node))
        if _EXPR_SELECT in kids:
            sel = dict(fields(kids[_EXPR_SELECT]))
            field = sel.get(2)
            path.append(field if isinstance(field, bytes) else b"")
            operand = sel.get(1)
            if not isinstance(operand, bytes):
                return False
            node = operand
        elif _EXPR_CALL in kids:
            call = list(fields(kids[_EXPR_CALL]))
            fn = next((v for n, v in call if n == 2), b"")
            args = [v for n, v in call if n == 3 and isinstance(v, bytes)]
            if fn not in (b"_[_]", b"_[?_]") or not args:
                return False
            path.append(b"[]")
            node = args[0]
        elif _EXPR_IDENT in kids:
            name = dict(fields(kids[_EXPR_IDENT])).get(1)
            if name != b"device":
                return bool(path)
            return bool(path) and path[-1] == b"attributes"
        else:
            return False


def _same(kind: str, elems: list[bytes], types: dict[int, bytes]) -> None:
    seen = {t for t in (_static(types, e) for e in elems) if t is not None}
    if len(seen) > 1:
        raise LiteralTypeError(f"expected type of {kind} to be the same for every element")


def _walk(expr: bytes, types: dict[int, bytes], exempt: bool = False) -> None:
    """Check the literals of an expression; those below a ``format`` call are exempt, as in
    kube-scheduler (``"%s %d".format(["a", 1])`` compiles)."""
    for kind, msg in _children(expr):
        if kind == _EXPR_LIST:
            elems = [v for n, v in fields(msg) if n == 1 and isinstance(v, bytes)]
            if not exempt:
                _same("list literal", elems, types)
            for e in elems:
                _walk(e, types, exempt)
        elif kind == _EXPR_STRUCT:
            keys: list[bytes] = []
            values: list[bytes] = []
            for n, entry in fields(msg):
                if n != 2 or not isinstance(entry, bytes):
                    continue
                for n2, v2 in fields(entry):
                    if n2 == 3 and isinstance(v2, bytes):
                        keys.append(v2)
                    elif n2 == 4 and isinstance(v2, bytes):
                        values.append(v2)
            if not exempt:
                _same("map literal keys", keys, types)
                _same("map literal values", values, types)
            for e in keys + values:
                _walk(e, types, exempt)
        elif kind in (_EXPR_SELECT, _EXPR_CALL, _EXPR_COMPREHENSION):
            below = exempt or (kind == _EXPR_CALL and (2, b"format") in fields(msg))
            for n, sub in fields(msg):
                if isinstance(sub, bytes) and n not in _STRING_FIELDS[kind]:
                    _walk(sub, types, below)


#: string (not Expr) fields of Select, Call and Comprehension, skipped in the walk
_STRING_FIELDS = {_EXPR_SELECT: {2}, _EXPR_CALL: {2}, _EXPR_COMPREHENSION: {1, 3, 8}}
