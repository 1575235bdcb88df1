"""The shapes of the verbs' bodies, checked before any verb reads them.

Only the fields the extender reads are typed (unknown ones pass unchecked): a body whose pod,
node names or binding arguments have another shape is answered 400 with the path of the first
wrong field, instead of failing deep inside a verb.
"""

from __future__ import annotations

from typing import Any

import msgspec

Quantity = str | int | float


class _Resources(msgspec.Struct):
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None


class _Container(msgspec.Struct):
    name: str = ""
    resources: _Resources | None = None


class _Spec(msgspec.Struct):
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    nodeName: str | None = None


class _Meta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None


class _Object(msgspec.Struct):
    metadata: _Meta | None = None
    spec: _Spec | None = None


class _NodeList(msgspec.Struct):
    items: list[_Object] | None = None


class _ExtenderArgs(msgspec.Struct):
    Pod: _Object | None = None
    NodeNames: list[str] | None = None
    Nodes: _NodeList | None = None


class _BindingArgs(msgspec.Struct):
    PodName: str = ""
    PodNamespace: str = ""
    PodUID: str = ""
    Node: str = ""


_SHAPES: dict[str, type[msgspec.Struct]] = {
    "filter": _ExtenderArgs,
    "prioritize": _ExtenderArgs,
    "bind": _BindingArgs,
}


#: Per verb, the top-level fields its shape types as flat lists of strings: a body that passed
#: :func:`check_shape` holds nothing nested there, so the depth walk can leave them out (at
#: 5,000 node names it was most of the cost of reading a body).
FLAT: dict[str, frozenset[str]] = {
    "filter": frozenset({"NodeNames"}),
    "prioritize": frozenset({"NodeNames"}),
}


class ShapeError(ValueError):
    pass


def check_shape(verb: str, args: dict[str, Any]) -> None:
    """:class:`ShapeError` (one line, with the field's path) if ``args`` is not ``verb``'s."""
    shape = _SHAPES.get(verb)
    if shape is None:
        return
    try:
        msgspec.convert(args, shape)
    except msgspec.ValidationError as err:
        raise ShapeError(str(err)) from None
