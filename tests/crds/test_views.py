"""The typed views (kubeacc.crds.views) against the Structs the CRDs' schemas make: every member a
view declares is a field of its Struct, none claims a value where the schema may give None, and
every view is reached from one of the kinds' roots."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import pydantic
import pytest

from kubeacc.crds import types as models
from kubeacc.crds import views
from kubeacc.crds.schemastructs import struct_type

ROOTS = {
    views.OperationSpecView: ("AcceleratorOperation", "spec"),
    views.OperationStatusView: ("AcceleratorOperation", "status"),
    views.AcceleratorSpecView: ("Accelerator", "spec"),
    views.AcceleratorStatusView: ("Accelerator", "status"),
    views.PolicySpecView: ("AcceleratorPolicy", "spec"),
    views.PolicyStatusView: ("AcceleratorPolicy", "status"),
}


def _members(view: type) -> dict[str, Any]:
    """A view's members and their types: properties' return types, plain attributes' types."""
    found = {}
    for name, member in vars(view).items():
        if isinstance(member, property) and member.fget is not None:
            found[name] = typing.get_type_hints(member.fget, vars(views))["return"]
    found.update(typing.get_type_hints(view, vars(views)))
    return found


def _bare(kind: Any) -> tuple[Any, bool]:
    """(the type inside Annotated / Optional, whether None is allowed)."""
    optional = False
    while True:
        if typing.get_origin(kind) is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(kind))
            (kind,) = args
        else:
            return kind, optional


def _items(kind: Any) -> Any:
    """The element type of a list / Sequence, the value type of a dict / Mapping, else itself."""
    origin = typing.get_origin(kind)
    if origin in (list, Sequence):
        return _bare(typing.get_args(kind)[0])[0]
    if origin in (dict, Mapping):
        return _bare(typing.get_args(kind)[1])[0]
    return kind


def _is_view(kind: Any) -> bool:
    return inspect.isclass(kind) and getattr(kind, "_is_protocol", False)


def _check(view: type, struct: Any, where: str, reached: set[type]) -> list[str]:
    reached.add(view)
    fields = {f.name: f for f in msgspec.structs.fields(struct)}
    wrong = []
    for name, hint in _members(view).items():
        if name not in fields:
            wrong.append(f"{where}: {view.__name__}.{name} is not a field ({sorted(fields)})")
            continue
        field_type, may_be_none = _bare(fields[name].type)
        hint_type, allows_none = _bare(hint)
        # A field without default but None (``x: T | None = None``) may be None in the API.
        if may_be_none and not allows_none:
            wrong.append(f"{where}.{name}: the schema may leave it None, the view says never")
        inner_hint = _items(hint_type)
        if _is_view(inner_hint):
            inner_struct = _items(field_type)
            if not (inspect.isclass(inner_struct) and issubclass(inner_struct, msgspec.Struct)):
                wrong.append(f"{where}.{name}: {inner_hint.__name__} over a non-object field")
                continue
            wrong += _check(inner_hint, inner_struct, f"{where}.{name}", reached)
    return wrong


def test_every_view_member_is_a_field_of_its_schema() -> None:
    reached: set[type] = set()
    wrong = []
    for view, (kind, path) in ROOTS.items():
        struct, _ = _bare(struct_type(kind, path))
        wrong += _check(view, struct, f"{kind} {path}", reached)
    assert not wrong, "\n".join(wrong)
    declared = {v for v in vars(views).values() if _is_view(v) and v.__module__ == views.__name__}
    assert declared == reached, (
        f"views no root reaches: {sorted(v.__name__ for v in declared - reached)}"
    )


MODELS = {
    views.OperationSpecView: models.AcceleratorOperationSpec,
    views.OperationStatusView: models.AcceleratorOperationStatus,
    views.AcceleratorSpecView: models.AcceleratorSpec,
    views.AcceleratorStatusView: models.AcceleratorStatus,
    views.PolicySpecView: models.AcceleratorPolicySpec,
    views.PolicyStatusView: models.AcceleratorPolicyStatus,
}


def _check_model(view: type, model: type[pydantic.BaseModel], where: str) -> list[str]:
    wrong = []
    for name, hint in _members(view).items():
        field = model.model_fields.get(name)
        if field is None:
            wrong.append(f"{where}: {view.__name__}.{name} is not a field of {model.__name__}")
            continue
        field_type, may_be_none = _bare(field.annotation)
        hint_type, allows_none = _bare(hint)
        if may_be_none and not allows_none:
            wrong.append(f"{where}.{name}: the model may hold None, the view says never")
        inner_hint, inner_model = _items(hint_type), _items(field_type)
        if _is_view(inner_hint):
            if not (inspect.isclass(inner_model) and issubclass(inner_model, pydantic.BaseModel)):
                wrong.append(f"{where}.{name}: {inner_hint.__name__} over a non-model field")
                continue
            wrong += _check_model(inner_hint, inner_model, f"{where}.{name}")
    return wrong


def test_the_pydantic_models_fit_the_views_too() -> None:
    """The CLI, the docs' examples and the tests build the same objects with the pydantic
    models; code typed with a view takes either."""
    wrong = []
    for view, model in MODELS.items():
        wrong += _check_model(view, model, model.__name__)
    assert not wrong, "\n".join(wrong)


class _Misspelt(typing.Protocol):
    @property
    def max_consumer(self) -> int: ...


class _TooSure(typing.Protocol):
    @property
    def memory_per_consumer_bytes(self) -> int: ...


@pytest.mark.parametrize(
    ("view", "expected"),
    [(_Misspelt, "_Misspelt.max_consumer is not a field"), (_TooSure, "the view says never")],
)
def test_the_check_finds_a_wrong_view(view: type, expected: str) -> None:
    sharing = _bare(struct_type("AcceleratorPolicy", "spec.sharing"))[0]
    wrong = _check(view, sharing, "sharing", set())
    assert len(wrong) == 1 and expected in wrong[0]
