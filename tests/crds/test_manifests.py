"""The CRD YAML under deploy/crds is exactly what the pydantic types generate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeacc.crds.manifests import SchemaError, crds, manifest_files, structural

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_deploy_crds_match_the_types() -> None:
    files = manifest_files()
    on_disk = {p.name: p.read_text() for p in DEPLOY.glob("*.yaml")}
    assert sorted(on_disk) == sorted(files), "run: kubeacc crds --write deploy/crds"
    for name, text in files.items():
        assert on_disk[name] == text, f"{name} is stale; run: kubeacc crds --write deploy/crds"


def _walk(node: Any, path: str = "") -> list[str]:
    problems: list[str] = []
    if isinstance(node, dict):
        if ("properties" in node or "items" in node or "enum" in node) and "type" not in node:
            problems.append(f"{path}: untyped")
        for bad in ("$ref", "anyOf", "oneOf", "allOf", "nullable"):
            if bad in node and path.count("/") > 0:
                problems.append(f"{path}: {bad}")
        if "properties" in node and "additionalProperties" in node:
            problems.append(f"{path}: properties and additionalProperties")
        for k, v in node.items():
            problems += _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            problems += _walk(v, f"{path}[{i}]")
    return problems


@pytest.mark.parametrize("crd", crds(), ids=lambda c: c["metadata"]["name"])
def test_schemas_are_structural(crd: dict[str, Any]) -> None:
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"]
    assert _walk(version["schema"]["openAPIV3Schema"]) == []
    yaml.safe_load(yaml.safe_dump(crd))


def test_unions_are_refused() -> None:
    with pytest.raises(SchemaError):
        structural({"anyOf": [{"type": "string"}, {"type": "integer"}]})


def test_operation_rules_are_in_the_schema() -> None:
    op = next(c for c in crds() if c["spec"]["names"]["kind"] == "AcceleratorOperation")
    spec = op["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert "self == oldSelf" in rules
    assert spec["properties"]["action"]["enum"] == [
        "Program",
        "Reset",
        "Power",
        "Attach",
        "Detach",
        "Drain",
        "Uncordon",
        "MigMode",
    ]
