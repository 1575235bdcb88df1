"""The CRDs' schemas as a file in the package, for the daemons that must not import pydantic.

``schemas.json`` holds each kind's ``openAPIV3Schema`` exactly as
:func:`kubeacc.crds.manifests.crds`
generates it from the pydantic API types: the schema the API server enforces. The node agent
builds its validating Structs from it (:mod:`kubeacc.crds.schemastructs`). It is a generated
file like ``deploy/crds/``: ``python -m kubeacc.crds.schemafile`` rewrites it, and
``tests/crds/test_schemastructs.py`` fails while it differs from what the types generate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("schemas.json")


def generate() -> str:
    """The file's text, from the pydantic API types (imports them)."""
    from kubeacc.crds.manifests import crds

    schemas = {
        c["spec"]["names"]["kind"]: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for c in crds()
    }
    return json.dumps(schemas, indent=1) + "\n"


def load() -> dict[str, Any]:
    """Kind -> its ``openAPIV3Schema``, from the file."""
    data = json.loads(PATH.read_text())
    assert isinstance(data, dict)
    return data


if __name__ == "__main__":
    PATH.write_text(generate())
    print(PATH)
