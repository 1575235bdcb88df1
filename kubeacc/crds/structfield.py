"""A model Struct (kubeacc.model) as a field of the pydantic API types.

The device model is msgspec (light enough for every node daemon); the CRD types stay pydantic,
since their schemas are the CRDs. ``StructField(Device)`` makes a pydantic field that validates
through the Struct's own ``from_json_dict``, serialises through its ``to_json_dict`` and puts
the Struct's JSON Schema, with references resolved, into the type's schema.
"""

from __future__ import annotations

from typing import Any, Protocol, Self

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from kubeacc.model.schema import model_schemas


class _Struct(Protocol):
    @classmethod
    def from_json_dict(cls, data: Any) -> Self: ...

    def to_json_dict(self) -> dict[str, Any]: ...


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every ``$ref`` into ``defs`` replaced by its target (the model has no
    recursive types)."""
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**defs[node["$ref"].split("/")[-1]], **rest}, defs)
    return {k: _inline(v, defs) for k, v in node.items()}


class StructField:
    """Annotation marker: ``Annotated[Device, StructField(Device)]``."""

    def __init__(self, kind: type[Any]) -> None:
        self.kind = kind

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        kind = self.kind

        def validate(value: Any) -> Any:
            return value if isinstance(value, kind) else kind.from_json_dict(value)

        def serialize(value: _Struct) -> dict[str, Any]:
            return value.to_json_dict()

        return core_schema.no_info_plain_validator_function(
            validate, serialization=core_schema.plain_serializer_function_ser_schema(serialize)
        )

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        (ref,), defs = model_schemas(self.kind)
        out = _inline(ref, defs)
        assert isinstance(out, dict)
        return out
