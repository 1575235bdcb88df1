"""The published JSON Schema of the inventory document (``kubeacc discover -o json``)."""

from __future__ import annotations

import json
from typing import Any

from kubeacc.model.accelerator import SCHEMA_VERSION, Inventory

SCHEMA_FILE = "docs/schema/inventory.v1alpha1.json"


def inventory_schema() -> dict[str, Any]:
    schema = Inventory.model_json_schema(by_alias=True, mode="serialization")
    schema["$id"] = f"https://kubeacc.io/schema/{SCHEMA_VERSION.split('/')[-1]}/inventory.json"
    schema["title"] = f"kube-acc inventory ({SCHEMA_VERSION})"
    return schema


def inventory_schema_json() -> str:
    return json.dumps(inventory_schema(), indent=2, sort_keys=True) + "\n"
