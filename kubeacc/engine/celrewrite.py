"""Reaching kube-scheduler's CEL functions the implementation will not let a library declare.

kube-scheduler's environment has functions whose names ``cel-expr-python`` already owns:
``string(ip)``/``string(cidr)`` (the standard ``string``), ``list.indexOf(x)`` and
``list.lastIndexOf(x)`` (the strings extension), the map insertion ``cel.@mapInsert`` that
``transformMap``/``transformMapEntry`` expand to (declared by the checker, missing at run
time), and the ordering operators between int, uint and double (declared without the cross-type
overloads). Adding overloads to an owned name is refused, so:

* the ordering operators are excluded from the standard library and declared again, with the
  cross-type overloads, in the environment's configuration (:data:`ORDERING_YAML`); the runtime
  already implements them;
* a call the checker rejects as ``string`` of an IP or CIDR, or ``indexOf``/``lastIndexOf`` of
  a list, is renamed at the position the checker reports to a function of this project
  (:func:`rename_rejected_calls`), and the expression is checked again;
* the map insertion in a checked expression is renamed to a function of this project of the
  same length (:func:`own_map_insert`), so the serialized expression keeps its framing.

The internal names start with :data:`PREFIX`, which an expression may not use itself.
"""

from __future__ import annotations

import re

PREFIX = "kubeacc_"

#: internal function for each name the checker may reject, keyed by the name
RENAMED = {
    "string": "kubeacc_string",
    "indexOf": "kubeacc_listIndexOf",
    "lastIndexOf": "kubeacc_listLastIndexOf",
}

#: the format library's internal functions (:mod:`kubeacc.engine.celformatlib`), by the name
#: an expression calls; only checker messages are translated back with these
_FORMAT_LIBRARY = {"validate": "kubeacc_fmtValidate", "format.named": "kubeacc_fmtNamed"}

#: the map insertion and its replacement; equal lengths keep the wire framing intact
MAP_INSERT = b"cel.@mapInsert"
OWN_MAP_INSERT = "kubeacc_mapIns"
assert len(MAP_INSERT) == len(OWN_MAP_INSERT)

_REJECTED = re.compile(
    r"ERROR: <input>:(\d+):(\d+): found no matching overload for '(string|indexOf|lastIndexOf)' "
    r"applied to '\((kubeacc\.cel\.(?:IP|CIDR)|list\([^']*)"
)

_OWN_NAME = re.compile(rf"\b{PREFIX}\w*")

_NUMERIC = ("int64", "uint64", "double")
_TYPE_NAME = {"int64": "int", "uint64": "uint", "double": "double"}
_OPERATORS = {
    "_<_": "less",
    "_<=_": "less_equals",
    "_>_": "greater",
    "_>=_": "greater_equals",
}
#: same-type operands the standard library orders, by overload-id suffix and type name
_SAME_TYPE = (
    ("bool", "bool"),
    ("int64", "int"),
    ("uint64", "uint"),
    ("double", "double"),
    ("string", "string"),
    ("bytes", "bytes"),
    ("timestamp", "google.protobuf.Timestamp"),
    ("duration", "google.protobuf.Duration"),
)


def _overload(oid: str, a: str, b: str) -> str:
    return (
        f"      - id: {oid}\n        args:\n          - type_name: {a}\n"
        f"          - type_name: {b}\n        return:\n          type_name: bool\n"
    )


def _ordering_yaml() -> str:
    out = ["stdlib:\n  exclude_functions:\n"]
    out += [f"    - name: {op}\n" for op in _OPERATORS]
    out.append("functions:\n")
    for op, stem in _OPERATORS.items():
        out.append(f"  - name: {op}\n    overloads:\n")
        out += [_overload(f"{stem}_{suffix}", t, t) for suffix, t in _SAME_TYPE]
        for a in _NUMERIC:
            for b in _NUMERIC:
                if a != b:
                    out.append(_overload(f"{stem}_{a}_{b}", _TYPE_NAME[a], _TYPE_NAME[b]))
    return "".join(out)


#: configuration that declares ``<``, ``<=``, ``>``, ``>=`` with the cross-type numeric
#: overloads kube-scheduler's environment enables
ORDERING_YAML = _ordering_yaml()


def own_name_used(expression: str) -> str | None:
    """An internal function name written in the expression itself (kube-scheduler has no
    such function, so the expression must fail to compile), or None."""
    m = _OWN_NAME.search(expression)
    return m.group(0) if m else None


def rename_rejected_calls(expression: str, message: str) -> str | None:
    """The expression with each call the checker rejected (``string`` of an IP or CIDR,
    ``indexOf``/``lastIndexOf`` of a list) renamed to the internal function; None when the
    message names no such call."""
    starts = [0]
    for text in expression.split("\n"):
        starts.append(starts[-1] + len(text) + 1)
    edits: list[tuple[int, str]] = []
    for m in _REJECTED.finditer(message):
        line, col, name = int(m.group(1)), int(m.group(2)), m.group(3)
        if line > len(starts) - 1:
            continue
        paren = starts[line - 1] + col - 1
        if paren >= len(expression) or expression[paren] != "(":
            continue
        end = paren
        while end > 0 and expression[end - 1].isspace():
            end -= 1
        if expression[end - len(name) : end] != name:
            continue
        edits.append((end - len(name), name))
    if not edits:
        return None
    out = expression
    for start, name in sorted(set(edits), reverse=True):
        out = out[:start] + RENAMED[name] + out[start + len(name) :]
    return out


def public_message(message: str) -> str:
    """A checker message about a renamed call, with the name the expression used."""
    for name, internal in (*RENAMED.items(), *_FORMAT_LIBRARY.items()):
        message = message.replace(internal, name)
    return message


def own_map_insert(serialized: bytes) -> bytes:
    """The checked expression with the map insertion calling this project's function."""
    return serialized.replace(MAP_INSERT, OWN_MAP_INSERT.encode())
