"""Output formats shared by commands: table (rich), json, yaml."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import yaml


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def dump(data: Any, fmt: Format) -> str:
    if fmt is Format.JSON:
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False)
