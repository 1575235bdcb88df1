"""Validating msgspec Structs built from the CRDs' own schemas, for the node agent.

The node agent reads AcceleratorPolicies and writes the fault report in an Accelerator's
status. It checks both against the schema the API server enforces — each kind's generated
``openAPIV3Schema``, shipped as ``schemas.json`` (:mod:`kubeacc.crds.schemafile`) — through
Structs made from that schema when first asked for, so it needs neither pydantic nor a second,
hand-kept declaration of the same fields. The pydantic types (:mod:`kubeacc.crds.types`) stay
the one source, and the CLI keeps using them; the life-cycle agent and the controller read
through these Structs as well (:mod:`kubeacc.crds.apiread`, :mod:`kubeacc.crds.controlread`).

A Struct's attributes are the schema's property names in snake case (``maxConsumers`` ->
``max_consumers``); enumerations are ``Literal`` strings (they compare equal to the
:mod:`kubeacc.crds.api` enums). Types, enumerations, patterns, lengths, bounds, item counts
and required fields are checked; defaults are filled in as the API server fills them, and an
optional object whose own fields are all optional defaults to its empty form (as the pydantic
types do). Not checked: CEL rules (``x-kubernetes-validations``), which only the API server
evaluates, and ``format``. A schema keyword this module does not know raises, so a new kind of
field cannot be skipped silently.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal

import msgspec

from kubeacc.crds.schemafile import load


class SchemaViolation(ValueError):
    """An object that does not satisfy its kind's schema; the message says where and why."""


#: Keywords that describe or annotate a node but constrain nothing checked here.
_IGNORED = {"description", "format", "default", "x-kubernetes-validations"}
_LIST_KEYS = {"x-kubernetes-list-type", "x-kubernetes-list-map-keys"}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _meta(schema: dict[str, Any], pairs: dict[str, str]) -> dict[str, Any]:
    return {ours: schema[theirs] for theirs, ours in pairs.items() if theirs in schema}


def _check_keys(schema: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(schema) - allowed - _IGNORED - {"type"}
    if unknown:
        raise TypeError(f"{where}: schema keywords {sorted(unknown)} are not supported")


def _annotated(base: Any, meta: dict[str, Any]) -> Any:
    return Annotated[base, msgspec.Meta(**meta)] if meta else base


def _type(schema: dict[str, Any], where: str) -> Any:
    kind = schema.get("type")
    if kind == "string":
        _check_keys(schema, {"enum", "pattern", "minLength", "maxLength"}, where)
        if "enum" in schema:
            return Literal[tuple(schema["enum"])]
        pairs = {"pattern": "pattern", "minLength": "min_length", "maxLength": "max_length"}
        return _annotated(str, _meta(schema, pairs))
    if kind in ("integer", "number"):
        _check_keys(schema, {"minimum", "maximum"}, where)
        base = int if kind == "integer" else float
        return _annotated(base, _meta(schema, {"minimum": "ge", "maximum": "le"}))
    if kind == "boolean":
        _check_keys(schema, set(), where)
        return bool
    if kind == "array":
        _check_keys(schema, {"items", "minItems", "maxItems"} | _LIST_KEYS, where)
        item = _type(schema["items"], f"{where}[]")
        pairs = {"minItems": "min_length", "maxItems": "max_length"}
        return _annotated(list[item], _meta(schema, pairs))  # type: ignore[valid-type]
    if kind == "object":
        return _object(schema, where)
    raise TypeError(f"{where}: schema type {kind!r} is not supported")


def _object(schema: dict[str, Any], where: str) -> Any:
    allowed = {"properties", "required", "additionalProperties", "minProperties"}
    _check_keys(schema, allowed | {"maxProperties", "x-kubernetes-preserve-unknown-fields"}, where)
    pairs = {"minProperties": "min_length", "maxProperties": "max_length"}
    if "properties" not in schema:
        extra = schema.get("additionalProperties")
        value = _type(extra, f"{where}{{}}") if isinstance(extra, dict) else Any
        return _annotated(dict[str, value], _meta(schema, pairs))  # type: ignore[valid-type]
    required = set(schema.get("required", ()))
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    for name, prop in schema["properties"].items():
        attr = _snake(name)
        rename[attr] = name
        kind = _type(prop, f"{where}.{name}")
        if name in required:
            fields.append((attr, kind, msgspec.NODEFAULT))
        elif "default" in prop:
            fields.append((attr, kind, prop["default"]))
        elif prop.get("type") == "array":
            fields.append((attr, kind, msgspec.field(default_factory=list)))
        elif prop.get("type") == "object" and not prop.get("required"):
            fields.append((attr, kind, msgspec.field(default_factory=_empty(kind))))
        else:
            fields.append((attr, kind | None, None))
    # Required fields first: a Struct's fields without defaults may not follow those with one.
    fields.sort(key=lambda f: f[2] is not msgspec.NODEFAULT)
    name = "".join(p[:1].upper() + p[1:] for p in re.split(r"[.\[\]{}]+", where) if p)
    return msgspec.defstruct(name, fields, kw_only=True, rename=rename)


def _empty(kind: Any) -> Any:
    return lambda: msgspec.convert({}, kind)


@functools.cache
def struct_type(kind: str, path: str) -> Any:
    """The Struct of the schema at ``path`` (dotted property names, e.g. ``spec`` or
    ``status.lastFault``) of ``kind``'s schema."""
    schema = load()[kind]
    for part in path.split("."):
        schema = schema["properties"][part]
    return _type(schema, f"{kind}.{path}")


def validate(kind: str, path: str, data: Any) -> Any:
    """``data`` (JSON-like) as the Struct of ``kind``'s ``path``; raises :class:`SchemaViolation`
    naming the field, e.g. ``AcceleratorPolicy spec.sharing.maxConsumers: Expected `int` <= 64``."""
    try:
        return msgspec.convert(data, struct_type(kind, path))
    except msgspec.ValidationError as exc:
        raise SchemaViolation(f"{kind} {_where(path, str(exc))}") from None


def problems(kind: str, path: str, data: Any) -> list[str]:
    """What ``kind``'s ``path`` schema refuses in ``data``, each as ``path.field: why``; empty
    when it is valid. msgspec stops at the first error: of an object, each field is checked on
    its own so that every wrong or missing field is named."""
    try:
        validate(kind, path, data)
    except SchemaViolation as exc:
        first = str(exc).removeprefix(f"{kind} ")
    else:
        return []
    struct = struct_type(kind, path)
    if not (isinstance(data, dict) and isinstance(struct, type)):
        return [first]
    found = []
    for field in msgspec.structs.fields(struct):
        name = field.encode_name
        if name not in data:
            if field.required:
                found.append(f"{path}: Object missing required field `{name}`")
            continue
        try:
            msgspec.convert(data[name], field.type)
        except msgspec.ValidationError as exc:
            found.append(_where(f"{path}.{name}", str(exc)))
    return found or [first]


def _where(path: str, message: str) -> str:
    """msgspec's ``... - at `$.a.b``` as ``path.a.b: ...``."""
    text, sep, at = message.rpartition(" - at `$")
    if not sep:
        return f"{path}: {message}"
    return f"{path}{at.rstrip('`')}: {text}"


def to_api(obj: Any) -> Any:
    """A Struct as the API's JSON (camelCase names), unset optional fields left out."""
    return _drop_none(msgspec.to_builtins(obj))


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value
