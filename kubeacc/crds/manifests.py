"""CustomResourceDefinitions generated from the pydantic API types.

``crds()`` builds the three apiextensions.k8s.io/v1 CRDs; ``deploy/crds/`` holds their YAML
(``kubeacc crds --write deploy/crds`` regenerates it) and a test fails when the files and the
types disagree.

Pydantic emits JSON Schema (draft 2020-12, ``$ref``/``$defs``, ``anyOf`` with ``null`` for
optional fields). Kubernetes wants a *structural* OpenAPI v3 schema: every node typed, no
references, no ``anyOf`` at the type level, no ``additionalProperties`` next to ``properties``.
``structural()`` does that translation; anything it does not understand raises, so a new kind
of field cannot silently produce a schema the API server would reject.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from kubeacc.crds.api import GROUP, VERSION
from kubeacc.crds.types import (
    AcceleratorOperationSpec,
    AcceleratorOperationStatus,
    AcceleratorPolicySpec,
    AcceleratorPolicyStatus,
    AcceleratorSpec,
    AcceleratorStatus,
)

_KEEP = {
    "description",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "format",
    "enum",
}
_DROP = {"title", "readOnly", "writeOnly", "examples", "additionalProperties"}


class SchemaError(ValueError):
    pass


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Translate one pydantic JSON Schema node into a structural OpenAPI v3 schema node."""
    defs = defs if defs is not None else schema.get("$defs", {})
    node = dict(schema)
    node.pop("$defs", None)
    if "$ref" in node:
        target = defs[node.pop("$ref").split("/")[-1]]
        merged = {**target, **node}
        return structural(merged, defs)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise SchemaError(f"unions are not structural: {options}")
        node.pop("default", None)  # a None default
        return structural({**options[0], **node}, defs)
    if "allOf" in node:
        (only,) = node.pop("allOf")
        return structural({**only, **node}, defs)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {}
    kind = node.get("type")
    if kind is None:
        raise SchemaError(f"untyped schema node: {node}")
    out["type"] = kind
    for key, value in node.items():
        if key in _KEEP or key.startswith("x-kubernetes-"):
            out[key] = value
        elif key == "default":
            if isinstance(value, str | int | bool | float) and not isinstance(value, type(None)):
                out["default"] = value
        elif key in _DROP or key in ("type", "properties", "items", "required"):
            continue
        else:
            raise SchemaError(f"unsupported JSON Schema keyword {key!r} in {node}")
    if kind == "object":
        props = node.get("properties")
        if props:
            out["properties"] = {k: structural(v, defs) for k, v in props.items()}
            if node.get("required"):
                out["required"] = list(node["required"])
        else:
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):
                out["additionalProperties"] = structural(extra, defs)
            else:
                out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["items"] = structural(node.get("items", {}), defs)
    if out.get("format") not in (None, "date-time", "int64", "int32", "byte"):
        out.pop("format")
    return out


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    return structural(model.model_json_schema(by_alias=True, mode="serialization"))


def _col(name: str, path: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        col["priority"] = priority
    return col


_AGE = _col("Age", ".metadata.creationTimestamp", "date")


def _crd(
    kind: str,
    plural: str,
    scope: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, Any]],
    short_names: list[str],
    *,
    spec_required: bool = True,
    name_rule: tuple[str, str] | None = None,
) -> dict[str, Any]:
    root: dict[str, Any] = {
        "type": "object",
        "description": f"{kind} ({GROUP}/{VERSION}); see docs/lifecycle.md",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(spec),
            "status": model_schema(status),
        },
    }
    if spec_required:
        root["required"] = ["spec"]
    if name_rule:
        root["x-kubernetes-validations"] = [{"rule": name_rule[0], "message": name_rule[1]}]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["kubeacc"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [*columns, _AGE],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crds() -> list[dict[str, Any]]:
    """The three CRDs, in the order they are applied."""
    return [
        _crd(
            "Accelerator",
            "accelerators",
            "Cluster",
            AcceleratorSpec,
            AcceleratorStatus,
            [
                _col("Node", ".spec.node"),
                _col("Type", ".status.device.type"),
                _col("Vendor", ".status.device.vendor"),
                _col("Model", ".status.device.model"),
                _col("PCI", ".status.device.pciBusID"),
                _col("Health", ".status.device.health.state"),
                _col("Cordoned", ".spec.cordoned", "boolean", priority=1),
                _col("AFU", ".status.device.fpga.afuId", priority=1),
                _col("Driver", ".status.device.pci.driver", priority=1),
            ],
            ["acc"],
            name_rule=(
                "self.metadata.name == self.spec.node + '-' + self.spec.deviceName",
                "metadata.name must be <spec.node>-<spec.deviceName>",
            ),
        ),
        _crd(
            "AcceleratorPolicy",
            "acceleratorpolicies",
            "Cluster",
            AcceleratorPolicySpec,
            AcceleratorPolicyStatus,
            [
                _col("Types", ".spec.selector.types"),
                _col("Sharing", ".spec.sharing.mode"),
                _col("OnUnhealthy", ".spec.onUnhealthy"),
                _col("DeviceClass", ".status.deviceClassName"),
                _col("Matched", ".status.matchedAccelerators", "integer"),
            ],
            ["accpol"],
        ),
        _crd(
            "AcceleratorOperation",
            "acceleratoroperations",
            "Namespaced",
            AcceleratorOperationSpec,
            AcceleratorOperationStatus,
            [
                _col("Action", ".spec.action"),
                _col("Targets", ".status.targets"),
                _col("Phase", ".status.phase"),
                _col("Selector", ".spec.targetSelector.matchLabels", priority=1),
                _col("Message", ".status.message", priority=1),
            ],
            ["accop"],
        ),
    ]


def crd_yaml(crd: dict[str, Any]) -> str:
    return yaml.safe_dump(crd, sort_keys=False, width=100)


def manifest_files() -> dict[str, str]:
    """File name -> YAML text, as kept under ``deploy/crds/``."""
    return {f"{c['metadata']['name']}.yaml": crd_yaml(c) for c in crds()}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in manifest_files().items():
        path = directory / name
        path.write_text(text)
        out.append(path)
    return out
