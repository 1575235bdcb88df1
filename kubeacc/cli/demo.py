"""``kubeacc demo``: kube-acc's main job on this machine alone.

Builds synthetic nodes (real Linux /sys, /dev, /proc layouts) and runs the real discovery code
on each, as the node agent does on a real node.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kubeacc.cli.discover import render_table
from kubeacc.discovery import discover
from kubeacc.synthetic import profiles

DEMO_NODES = ("dgx-h100", "intel-fpga-dfl", "kunlun-xpu", "edge-mixed")


def demo_command(
    workdir: Annotated[
        Path | None,
        typer.Option(help="Where to write the synthetic nodes (default: a temporary dir)."),
    ] = None,
) -> None:
    """Discover the accelerators of several synthetic nodes and show what was found."""
    console = Console()
    with tempfile.TemporaryDirectory(prefix="kubeacc-demo-") as tmp:
        base = workdir or Path(tmp)
        for name in DEMO_NODES:
            root = profiles.build(name, base / name)
            inv = discover(root)
            console.rule(f"node {name}  (host root {root})")
            render_table(inv, console)
            for warning in inv.warnings:
                console.print(f"[yellow]warning:[/yellow] {warning}")
