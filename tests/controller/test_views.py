"""Accelerators are parsed once per resourceVersion: the same view while the version stands, a
new one (with the change) when it moves, none for an Accelerator that is gone."""

from __future__ import annotations

from typing import Any

from kubeacc.controller.views import ParsedAccelerators


def _acc(name: str, version: str, cordoned: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {"node": "n", "deviceName": name, "cordoned": cordoned},
        "status": {},
    }


def test_a_view_is_kept_while_the_version_stands() -> None:
    parsed = ParsedAccelerators()
    first = parsed.views({"a": _acc("a", "1", False), "b": _acc("b", "2", False)})
    again = parsed.views({"a": _acc("a", "1", False), "b": _acc("b", "3", True)})
    assert again["a"] is first["a"]
    assert again["b"] is not first["b"]
    assert again["b"].spec.cordoned and not first["b"].spec.cordoned
    assert set(parsed.views({"b": _acc("b", "3", True)})) == {"b"}
    assert parsed.views({"a": _acc("a", "1", True)})["a"].spec.cordoned  # "a" was forgotten


def test_an_object_without_a_version_is_parsed_every_time() -> None:
    parsed = ParsedAccelerators()
    bare = {"metadata": {"name": "a"}, "spec": {"node": "n", "deviceName": "a"}, "status": {}}
    assert parsed.views({"a": bare})["a"] is not parsed.views({"a": bare})["a"]
