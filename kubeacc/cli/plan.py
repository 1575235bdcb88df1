"""``kubeacc plan``: where would these ResourceClaims be allocated, or why not.

Reads every ``*.yaml``/``*.yml``/``*.json`` file under a folder (multi-document YAML and ``List``
kinds are fine), or the live objects of a cluster (``--kubeconfig``), sorts the objects by kind
(ResourceSlice, DeviceClass, ResourceClaim, Node), treats claims that already carry
``status.allocation`` as existing allocations, and plans the others in order. Prints a
table, or JSON with ``-o json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from kubeacc.engine.engine import Engine, Placement


def load_objects(folder: Path) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            if doc.get("kind", "").endswith("List") and isinstance(doc.get("items"), list):
                objs.extend(i for i in doc["items"] if isinstance(i, dict))
            else:
                objs.append(doc)
    return objs


def cluster_objects(kubeconfig: Path, namespace: str | None = None) -> list[dict[str, Any]]:
    """ResourceSlices, DeviceClasses, Nodes and ResourceClaims of a live cluster, as dicts."""
    from lightkube import Client, KubeConfig
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

    client = Client(KubeConfig.from_file(kubeconfig))
    objs: list[dict[str, Any]] = []
    for kind, name in (
        (ResourceSlice, "ResourceSlice"),
        (DeviceClass, "DeviceClass"),
        (Node, "Node"),
    ):
        objs += [{**o.to_dict(), "kind": name} for o in client.list(kind)]  # type: ignore[attr-defined]
    ns = namespace if namespace is not None else "*"
    objs += [
        {**o.to_dict(), "kind": "ResourceClaim"} for o in client.list(ResourceClaim, namespace=ns)
    ]
    return objs


def run_plan(objs: list[dict[str, Any]]) -> list[Placement]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        by_kind.setdefault(str(o.get("kind", "")), []).append(o)
    claims = by_kind.get("ResourceClaim", [])
    existing = [c for c in claims if (c.get("status") or {}).get("allocation")]
    pending = [c for c in claims if not (c.get("status") or {}).get("allocation")]
    nodes = by_kind.get("Node")
    engine = Engine(
        by_kind.get("ResourceSlice", []),
        by_kind.get("DeviceClass", []),
        existing,
        nodes if nodes else None,
    )
    return engine.plan(pending)


def plan(
    folder: Annotated[
        Path | None,
        typer.Argument(
            help="Folder of YAML/JSON: slices, classes, claims", exists=True, file_okay=False
        ),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="Plan the pending claims of a live cluster instead of a folder."),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="With --kubeconfig: only claims of this namespace.")
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table",
) -> None:
    """Show where each ResourceClaim would be allocated, or why it cannot be."""
    if (folder is None) == (kubeconfig is None):
        typer.echo("error: give either a folder or --kubeconfig", err=True)
        raise typer.Exit(code=2)
    objs = cluster_objects(kubeconfig, namespace) if kubeconfig else load_objects(folder)  # type: ignore[arg-type]
    placements = run_plan(objs)
    if output == "json":
        typer.echo(json.dumps([p.to_dict() for p in placements], indent=2))
    else:
        console = Console()
        table = Table(title="kubeacc plan")
        for col in ("claim", "node", "devices", "why not"):
            table.add_column(col)
        for p in placements:
            if p.allocation is not None:
                devs = ", ".join(
                    f"{r['request']}: {r['pool']}/{r['device']}"
                    for r in p.allocation["devices"]["results"]
                )
                table.add_row(p.claim, p.node or "(any)", devs, "")
            else:
                why = "\n".join(p.explanation.lines()) if p.explanation else "unknown"
                table.add_row(p.claim, "-", "-", why)
        console.print(table)
    if any(not p.ok for p in placements):
        raise typer.Exit(code=1)
