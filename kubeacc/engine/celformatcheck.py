"""The compile-time side of ``string.format``: kube-scheduler's check, and the call renaming.

kube-scheduler checks every ``format`` call whose format string is a literal and whose
arguments are a list literal when it compiles a selector: the clauses must parse, each
argument's static type must suit its clause (``dyn`` suits all), and no argument may be left
over. A selector that fails the check does not compile, even where the call would never run.
Static types are kube-scheduler's: an attribute value is ``google.protobuf.Any`` (which suits
no clause: ``"%s".format([device.attributes["d"].model])`` does not compile, ``dyn(...)`` of it
does), a capacity a ``kubernetes.Quantity``, ``device`` a ``kubernetes.DRADevice``; the checker
here types ``device`` as a map of ``dyn``, so those reads are recognised by their shape (also
through a ``cel.bind`` variable).

The engine runs its own ``format`` (:mod:`kubeacc.engine.celformat`): :func:`rename_format_calls`
points every ``format`` call of the checked expression at it. The checked expression is the
serialized ``cel.expr.CheckedExpr``; names are rewritten in place, same length, so the wire
framing stays intact.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kubeacc.engine.celcheck import _varint
from kubeacc.engine.celformat import CLAUSE_ERRORS, GO_MESSAGE_NAMES, FormatError, scan

#: the function the engine's ``format`` is declared as; ``@`` keeps it out of reach of
#: expressions, the length equals ``format``'s
OWN_FORMAT = "@kfmt_"
assert len(OWN_FORMAT) == len("format")

_ANY_ID = "type.googleapis.com/cel.expr.CheckedExpr"

#: the kinds each clause accepts (kube-scheduler compares kinds only)
_ACCEPTS = {
    "s": {
        "list",
        "map",
        "int",
        "uint",
        "double",
        "bool",
        "string",
        "timestamp",
        "bytes",
        "duration",
        "type",
        "null",
    },
    "d": {"int", "uint"},
    "o": {"int", "uint"},
    "f": {"double", "string"},
    "e": {"double", "string"},
    "b": {"int", "uint", "bool"},
    "x": {"int", "uint", "string", "bytes"},
    "X": {"int", "uint", "string", "bytes"},
}
_PRIMITIVE = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {
    1: ("any", "google.protobuf.Any"),
    2: ("timestamp", "google.protobuf.Timestamp"),
    3: ("duration", "google.protobuf.Duration"),
}


class FormatCheckError(ValueError):
    """A ``format`` call kube-scheduler refuses to compile."""


# -- the checked expression as a tree --------------------------------------------------------


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field, wire type, start, end) of each field; for a varint, start is its value."""
    i = start
    while i < end:
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
            yield num, 0, v, i
        elif wire == 2:
            n, i = _varint(buf, i)
            yield num, 2, i, i + n
            i += n
        elif wire == 1:
            yield num, 1, i, i + 8
            i += 8
        elif wire == 5:
            yield num, 5, i, i + 4
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


@dataclass
class Node:
    """One ``cel.expr.Expr``: what the checks read of it."""

    id: int = 0
    kind: str = ""
    name: str = ""  # ident name, select field, call function, or string constant
    is_string: bool = False
    name_span: tuple[int, int] = (0, 0)
    target: Node | None = None
    children: list[Node] = field(default_factory=list)
    #: map literal entries as (key, value); comprehension parts by name
    entries: list[tuple[Node, Node]] = field(default_factory=list)
    parts: dict[str, Any] = field(default_factory=dict)


_COMPREHENSION = {
    1: "iter_var",
    2: "iter_range",
    3: "accu_var",
    4: "accu_init",
    5: "loop_condition",
    6: "loop_step",
    7: "result",
    8: "iter_var2",
}


def _parse(buf: bytes, start: int, end: int) -> Node:
    node = Node()
    for num, wire, s, e in _fields(buf, start, end):
        if num == 2 and wire == 0:
            node.id = s
        elif num == 3:
            node.kind = "const"
            for n2, _w2, s2, e2 in _fields(buf, s, e):
                if n2 == 6:
                    node.is_string, node.name = True, buf[s2:e2].decode()
        elif num == 4:
            node.kind = "ident"
            node.name = _string(buf, s, e, 1)
        elif num == 5:
            node.kind = "select"
            for n2, _w2, s2, e2 in _fields(buf, s, e):
                if n2 == 1:
                    node.target = _parse(buf, s2, e2)
                elif n2 == 2:
                    node.name = buf[s2:e2].decode()
        elif num == 6:
            node.kind = "call"
            for n2, _w2, s2, e2 in _fields(buf, s, e):
                if n2 == 1:
                    node.target = _parse(buf, s2, e2)
                elif n2 == 2:
                    node.name, node.name_span = buf[s2:e2].decode(), (s2, e2)
                elif n2 == 3:
                    node.children.append(_parse(buf, s2, e2))
        elif num == 7:
            node.kind = "list"
            node.children = [
                _parse(buf, s2, e2) for n2, w2, s2, e2 in _fields(buf, s, e) if n2 == 1
            ]
        elif num == 8:
            node.kind = "struct"
            for n2, _w2, s2, e2 in _fields(buf, s, e):
                if n2 == 2:
                    node.entries.append(_entry(buf, s2, e2))
        elif num == 9:
            node.kind = "comprehension"
            for n2, w2, s2, e2 in _fields(buf, s, e):
                part = _COMPREHENSION.get(n2)
                if part is None or w2 != 2:
                    continue
                if part in ("iter_var", "accu_var", "iter_var2"):
                    node.parts[part] = buf[s2:e2].decode()
                else:
                    node.parts[part] = _parse(buf, s2, e2)
    return node


def _string(buf: bytes, start: int, end: int, num: int) -> str:
    for n, _w, s, e in _fields(buf, start, end):
        if n == num:
            return buf[s:e].decode()
    return ""


def _entry(buf: bytes, start: int, end: int) -> tuple[Node, Node]:
    key, value = Node(kind="none"), Node(kind="none")
    for n, _w, s, e in _fields(buf, start, end):
        if n == 3:
            key = _parse(buf, s, e)
        elif n == 4:
            value = _parse(buf, s, e)
    return key, value


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in _subnodes(node):
        yield from _walk(child)


def _subnodes(node: Node) -> list[Node]:
    out = [node.target] if node.target is not None else []
    out += node.children
    for k, v in node.entries:
        out += [k, v]
    out += [v for v in node.parts.values() if isinstance(v, Node)]
    return out


@dataclass
class Checked:
    root: Node
    types: dict[int, tuple[str, str]]
    overloads: dict[int, list[str]]


def _checked_span(buf: bytes) -> tuple[int, int]:
    """Where the CheckedExpr lies in the serialized program (it comes wrapped in an Any)."""
    type_url, value = "", (0, len(buf))
    for n, _w, s, e in _fields(buf, 0, len(buf)):
        if n == 1:
            type_url = buf[s:e].decode()
        elif n == 2:
            value = (s, e)
    return value if type_url == _ANY_ID else (0, len(buf))


def parse_checked(buf: bytes) -> Checked:
    start, end = _checked_span(buf)
    root = Node(kind="none")
    types: dict[int, tuple[str, str]] = {}
    overloads: dict[int, list[str]] = {}
    for n, _w, s, e in _fields(buf, start, end):
        if n == 4:
            root = _parse(buf, s, e)
        elif n in (2, 3):
            key, vs, ve = 0, 0, 0
            for n2, w2, s2, e2 in _fields(buf, s, e):
                if n2 == 1 and w2 == 0:
                    key = s2
                elif n2 == 2:
                    vs, ve = s2, e2
            if n == 3:
                types[key] = _type(buf, vs, ve)
            else:
                overloads[key] = [
                    buf[s3:e3].decode() for n3, _, s3, e3 in _fields(buf, vs, ve) if n3 == 3
                ]
    return Checked(root, types, overloads)


def _type(buf: bytes, start: int, end: int) -> tuple[str, str]:
    """(kind, name) of a ``cel.expr.Type``; ``dyn`` and what the check does not know pass."""
    for n, w, s, e in _fields(buf, start, end):
        if n == 2:
            return "null", "null_type"
        if n == 3 and w == 0:
            return _PRIMITIVE[s], _PRIMITIVE[s]
        if n == 5 and w == 0:
            return _WELL_KNOWN.get(s, ("dyn", "dyn"))
        if n == 6:
            return "list", "list"
        if n == 7:
            return "map", "map"
        if n == 9:
            full = buf[s:e].decode()
            return "struct", GO_MESSAGE_NAMES.get(full.rpartition(".")[2], full)
        if n == 11:
            return "type", "type"
        if n == 14:
            name = _string(buf, s, e, 1)
            return "opaque", name
    return "dyn", "dyn"


# -- kube-scheduler's static types of device reads --------------------------------------------


def _device_path(node: Node, env: dict[str, tuple[str, ...] | None]) -> tuple[str, ...] | None:
    if node.kind == "ident":
        if node.name in env:
            return env[node.name]
        return () if node.name == "device" else None
    if node.kind == "select" and node.target is not None:
        base = _device_path(node.target, env)
        return None if base is None else (*base, node.name)
    if node.kind == "call" and node.name == "_[_]" and len(node.children) == 2:
        base = _device_path(node.children[0], env)
        key = node.children[1]
        if base is None:
            return None
        return (*base, key.name if key.kind == "const" and key.is_string else "*")
    return None


def _device_type(path: tuple[str, ...]) -> tuple[str, str] | None:
    if not path:
        return "struct", "kubernetes.DRADevice"
    head, depth = path[0], len(path)
    if path == ("driver",):
        return "string", "string"
    if path == ("allowMultipleAllocations",):
        return "bool", "bool"
    if head in ("attributes", "capacity") and depth <= 2:
        return "map", "map"
    if head == "attributes" and depth == 3:
        return "any", "google.protobuf.Any"
    if head == "capacity" and depth == 3:
        return "struct", "kubernetes.Quantity"
    return None


# -- the check -------------------------------------------------------------------------------


class _Check:
    """The clause callbacks of :func:`kubeacc.engine.celformat.scan` at compile time."""

    def __init__(
        self,
        args: list[Node],
        checked: Checked,
        env: dict[str, tuple[str, ...] | None],
        attributes_dyn: bool = False,
    ) -> None:
        self.args, self.checked, self.env = args, checked, env
        self.attributes_dyn = attributes_dyn
        self.requested = 0

    def size(self) -> int:
        return len(self.args)

    def arg(self, index: int) -> Any:
        self.requested += 1
        return index

    def clause(self, verb: str, precision: int | None, value: Any) -> str:
        node = self.args[value]
        bad = self._bad_string(node) if verb == "s" else self._bad(node, _ACCEPTS[verb])
        if bad is not None:
            raise FormatError(CLAUSE_ERRORS[verb].format(bad))
        return ""

    def static(self, node: Node) -> tuple[str, str]:
        path = _device_path(node, self.env)
        shaped = _device_type(path) if path is not None else None
        if shaped is not None:
            if self.attributes_dyn and shaped[0] == "any":
                return "dyn", "dyn"
            return shaped
        return self.checked.types.get(node.id, ("dyn", "dyn"))

    def _bad(self, node: Node, accepts: set[str]) -> str | None:
        kind, name = self.static(node)
        return None if kind == "dyn" or kind in accepts else name

    def _bad_string(self, node: Node) -> str | None:
        bad = self._bad(node, _ACCEPTS["s"])
        if bad is not None:
            return bad
        nested = node.children if node.kind == "list" else []
        for k, v in node.entries:
            nested += [k, v]
        for sub in nested:
            bad = self._bad_string(sub)
            if bad is not None:
                return bad
        return None


def check_format_calls(serialized: bytes, attributes_dyn: bool = False) -> None:
    """Raise :class:`FormatCheckError` for a ``format`` call kube-scheduler would not compile.
    ``attributes_dyn``: an attribute value suits every clause, as in v1.37 (cel-go v0.29),
    where it is judged at run time; v1.36 types it ``google.protobuf.Any``, which suits none."""
    checked = parse_checked(serialized)
    _check(checked.root, checked, {}, attributes_dyn)


def comprehension_parts(
    node: Node, env: dict[str, tuple[str, ...] | None]
) -> list[tuple[Node, dict[str, tuple[str, ...] | None]]]:
    """A comprehension's parts, each with the variables in scope there (its iteration
    variables unknown, its accumulator a device path when its initial value is one)."""
    inner = dict(env)
    for var in ("iter_var", "iter_var2"):
        if var in node.parts:
            inner[node.parts[var]] = None
    init = node.parts.get("accu_init")
    if "accu_var" in node.parts and isinstance(init, Node):
        inner[node.parts["accu_var"]] = _device_path(init, env)
    return [
        (sub, inner if part in ("loop_condition", "loop_step", "result") else env)
        for part, sub in node.parts.items()
        if isinstance(sub, Node)
    ]


def _check(
    node: Node,
    checked: Checked,
    env: dict[str, tuple[str, ...] | None],
    attributes_dyn: bool = False,
) -> None:
    if node.kind == "comprehension":
        for sub, scope in comprehension_parts(node, env):
            _check(sub, checked, scope, attributes_dyn)
        return
    if _is_checked_call(node, checked):
        assert node.target is not None
        args = node.children[0].children
        check = _Check(args, checked, env, attributes_dyn)
        try:
            scan(node.target.name, check)
        except FormatError as e:
            raise FormatCheckError(str(e)) from None
        if len(args) > check.requested:
            raise FormatCheckError(
                "too many arguments supplied to string.format "
                f"(expected {check.requested}, got {len(args)})"
            )
    for sub in _subnodes(node):
        _check(sub, checked, env, attributes_dyn)


def _is_checked_call(node: Node, checked: Checked) -> bool:
    if node.kind != "call" or node.name != "format" or node.target is None:
        return False
    ids = checked.overloads.get(node.id, [])
    if ids and "string_format" not in ids:
        return False
    target = node.target
    return (
        target.kind == "const"
        and target.is_string
        and len(node.children) == 1
        and node.children[0].kind == "list"
    )


def rename_format_calls(serialized: bytes) -> bytes:
    """The checked expression with every ``format`` member call calling :data:`OWN_FORMAT`."""
    checked = parse_checked(serialized)
    out = bytearray(serialized)
    for node in _walk(checked.root):
        if node.kind == "call" and node.name == "format" and node.target is not None:
            s, e = node.name_span
            out[s:e] = OWN_FORMAT.encode()
    return bytes(out)


def declaration() -> Any:
    """The engine's ``format``, declared under :data:`OWN_FORMAT`."""
    from cel_expr_python import cel

    from kubeacc.engine.celformat import format_string

    t = cel.Type
    overload = cel.Overload(
        "kubeacc_string_format",
        t.STRING,
        [t.STRING, t.List(t.DYN)],
        is_member=True,
        impl=format_string,
    )
    return cel.FunctionDecl(OWN_FORMAT, [overload])
