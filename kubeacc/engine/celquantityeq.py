"""``==`` and ``!=`` between two quantities by value, as in Go, although the engine's quantities
carry the form Go holds them in (:mod:`kubeacc.engine.celquantity`): the checked expression's
calls are renamed to functions comparing values. Apart from celquantity because it reads
checked expressions (celformatcheck) and declares CEL functions (k8scel), both of which use
celquantity.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from cel_expr_python import cel

from kubeacc.engine.celformatcheck import (
    Checked,
    Node,
    _device_path,
    _subnodes,
    comprehension_parts,
    parse_checked,
)
from kubeacc.engine.k8scel import _t

#: the names ``==``/``!=`` between quantities are renamed to (as long as ``_==_``/``_!=_``,
#: and beginning with ``@`` so that no expression can write them)
OWN_EQ, OWN_NE = "@qeq", "@qne"


def _is_quantity(node: Node, checked: Checked, env: dict[str, tuple[str, ...] | None]) -> bool:
    if checked.types.get(node.id) == ("struct", "kubernetes.Quantity"):
        return True
    path = _device_path(node, env)
    return path is not None and len(path) == 3 and path[0] == "capacity"


def rename_quantity_equality(serialized: bytes) -> bytes:
    """The checked expression with each ``==``/``!=`` between two quantities calling
    :data:`OWN_EQ`/:data:`OWN_NE` (same length, renamed in place)."""
    checked = parse_checked(serialized)
    out = bytearray(serialized)
    _rename(checked.root, checked, {}, out)
    return bytes(out)


def _rename(
    node: Node, checked: Checked, env: dict[str, tuple[str, ...] | None], out: bytearray
) -> None:
    if node.kind == "comprehension":
        for sub, scope in comprehension_parts(node, env):
            _rename(sub, checked, scope, out)
        return
    if (
        node.kind == "call"
        and node.name in ("_==_", "_!=_")
        and len(node.children) == 2
        and all(_is_quantity(c, checked, env) for c in node.children)
    ):
        s, e = node.name_span
        out[s:e] = (OWN_EQ if node.name == "_==_" else OWN_NE).encode()
    for sub in _subnodes(node):
        _rename(sub, checked, env, out)


def _equal(a: Any, b: Any) -> bool:
    da, db = getattr(a, "DESCRIPTOR", None), getattr(b, "DESCRIPTOR", None)
    if da is not None and db is not None and da.name == db.name == "Quantity":
        return Fraction(a.value) == Fraction(b.value)
    return bool(a == b)


def declarations() -> list[Any]:
    """:data:`OWN_EQ` and :data:`OWN_NE` over two quantities (the runtime picks an overload by
    argument kind: a quantity read from a device is one too)."""
    q, t = _t("Quantity"), cel.Type
    return [
        cel.FunctionDecl(
            OWN_EQ, [cel.Overload("kubeacc_quantity_eq", t.BOOL, [q, q], impl=_equal)]
        ),
        cel.FunctionDecl(
            OWN_NE,
            [
                cel.Overload(
                    "kubeacc_quantity_ne", t.BOOL, [q, q], impl=lambda a, b: not _equal(a, b)
                )
            ],
        ),
    ]
