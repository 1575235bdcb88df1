"""The published JSON Schema of the inventory document (``kubeacc discover -o json``).

msgspec writes the schema of the Structs; two things are added that it cannot know: enums are
strings (``"type": "string"`` beside their ``enum``, values in declaration order, where msgspec
sorts them), and a device's derived keys
(``pciBusID``, ``virtualFunctions``), which ``to_json_dict`` writes and input ignores.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from kubeacc.model.accelerator import (
    SCHEMA_VERSION,
    Device,
    DeviceType,
    FPGADriver,
    HealthState,
    Inventory,
    LinkKind,
    PartitionKind,
)

SCHEMA_FILE = "docs/schema/inventory.v1alpha1.json"

_ENUMS = {e.__name__: e for e in (DeviceType, FPGADriver, HealthState, LinkKind, PartitionKind)}
_DERIVED: dict[str, Any] = {
    "pciBusID": {
        "description": "The device's PCI address, at the top level as consumers expect it.",
        "readOnly": True,
        "type": "string",
    },
    "virtualFunctions": {
        "description": "PCI addresses of the SR-IOV virtual functions that are enabled now.",
        "items": {"type": "string"},
        "readOnly": True,
        "type": "array",
    },
}


def model_schemas(*types: type[msgspec.Struct]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """msgspec's schemas of ``types`` (``$ref`` nodes) and their shared ``$defs``, completed."""
    refs, defs = msgspec.json.schema_components(types)
    for name, node in defs.items():
        if "enum" in node:
            node["type"] = "string"
            node["enum"] = [m.value for m in _ENUMS[name]]
    device = defs.get(Device.__name__)
    if device is not None:
        device["properties"].update(_DERIVED)
        device["required"].append("virtualFunctions")  # always written; pciBusID when known
    return list(refs), defs


def inventory_schema() -> dict[str, Any]:
    _, defs = model_schemas(Inventory)
    schema: dict[str, Any] = {**defs.pop(Inventory.__name__), "$defs": defs}
    schema["$id"] = f"https://kubeacc.io/schema/{SCHEMA_VERSION.split('/')[-1]}/inventory.json"
    schema["title"] = f"kube-acc inventory ({SCHEMA_VERSION})"
    return schema


def inventory_schema_json() -> str:
    return json.dumps(inventory_schema(), indent=2, sort_keys=True) + "\n"
