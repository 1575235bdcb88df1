"""Output formats shared by commands: table, json, yaml.

A table goes to a terminal as a rich table that fits the terminal's width (see
:func:`print_table`); anywhere else (a pipe, a file) as plain columns in the
style of ``kubectl get``: a header line, columns separated by three spaces, no box drawing, no
colour, every value whole on its row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


class Format(StrEnum):
    TABLE = "table"
    #: The table with every column, none left out for the terminal's width.
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


OutputOption = Annotated[
    Format,
    typer.Option("--output", "-o", case_sensitive=False, help="table, wide, json or yaml."),
]


def is_table(fmt: Format) -> bool:
    return fmt in (Format.TABLE, Format.WIDE)


def dump(data: Any, fmt: Format) -> str:
    """``data`` as a JSON or YAML document (the table formats are each command's own)."""
    if fmt is Format.JSON:
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False)


#: A wrapping column counts this wide when deciding whether the table fits.
WRAP_MIN_WIDTH = 24


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    *,
    title: str | None = None,
    wrap: Sequence[str] = (),
    optional: Sequence[str] = (),
    console: Console | None = None,
    wide: bool = False,
) -> None:
    """Print ``rows`` under ``columns``; a cell is plain text (never markup) or a styled
    :class:`~rich.text.Text`, and may hold several lines.

    On a terminal, only the ``wrap`` columns wrap; every other column keeps its values whole.
    Where the terminal is too narrow for that, the ``optional`` columns are left out, in the
    order given, until the table fits, and a last line says which (``-o yaml`` has them all).
    ``wide`` (``-o wide``) keeps every column and every value whole, wider than the terminal
    where it must, as ``kubectl -o wide`` does.
    """
    out = console or Console()
    if not out.is_terminal:
        out.file.write(plain_table(columns, rows))
        return
    cells = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    natural = {
        col: max([len(col), *(len(line) for r in cells for line in r[i].plain.splitlines())])
        for i, col in enumerate(columns)
    }

    def needed(cols: list[str]) -> int:
        widths = (min(natural[c], WRAP_MIN_WIDTH) if c in wrap else natural[c] for c in cols)
        return sum(widths) + 2 * (len(cols) - 1)

    shown = list(columns)
    hidden: list[str] = []
    for col in () if wide else optional:
        if needed(shown) <= out.width:
            break
        shown.remove(col)
        hidden.append(col)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in shown:
        if col in wrap:
            table.add_column(col, overflow="fold", ratio=1)
        else:
            table.add_column(col, no_wrap=True, min_width=natural[col])
    keep = [columns.index(c) for c in shown]
    for row in cells:
        table.add_row(*(row[i] for i in keep))
    if wide:  # every column whole, lines as long as they need (the terminal wraps them)
        width = max(out.width, sum(natural.values()) + 3 * len(columns))
        # Console.print clamps to the console's width: a console as wide as the table instead
        wider = Console(file=out.file, width=width, force_terminal=True, no_color=out.no_color)
        wider.print(table)
    else:
        out.print(table)
    if hidden:
        out.print(f"({', '.join(hidden)} left out at this width; -o yaml shows everything)")


def plain_table(columns: Sequence[str], rows: Sequence[Sequence[str | Text]]) -> str:
    """``kubectl get``-style columns: styles dropped, lines of a cell joined with ``; ``."""
    cells = [list(columns)] + [[_plain(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def _plain(cell: str | Text) -> str:
    text = cell.plain if isinstance(cell, Text) else cell
    return "; ".join(part.strip() for part in text.splitlines() if part.strip()) or "-"
