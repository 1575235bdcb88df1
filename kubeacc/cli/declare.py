"""A command's options, declared once for both parsers: :func:`option`.

The long-running commands parse their options without typer (:mod:`kubeacc.cli.argv`), and
their modules do not import typer at all: it would cost each daemon start about 30 modules,
25-30 ms of CPU and 1.4 MB (docs/benchmarks.md, "Daemon start"). So their options are declared
as ``Annotated[T, option(...)]`` with this small type, which holds only what both parsers read;
the full CLI turns each into the ``typer.Option`` it stands for (:mod:`kubeacc.cli.typerize`).
"""

from __future__ import annotations

import msgspec


class Opt(msgspec.Struct, frozen=True):
    """An option's names and checks: the subset of ``typer.Option`` kube-acc's daemons use."""

    #: Its names (``"--type", "-t"``); none: ``--<parameter-name>`` (and ``--no-...`` for bool).
    decls: tuple[str, ...] = ()
    help: str | None = None
    #: The environment variable that stands in for a missing option.
    envvar: str | None = None
    min: int | float | None = None
    max: int | float | None = None
    #: For an Enum: whether ``INFO`` is ``info``.
    case_sensitive: bool = True
    #: For a Path: the checks typer makes when the path exists (and whether it must).
    exists: bool = False
    file_okay: bool = True
    dir_okay: bool = True
    metavar: str | None = None


def option(
    *decls: str,
    help: str | None = None,  # typer's name for it
    envvar: str | None = None,
    min: int | float | None = None,
    max: int | float | None = None,
    case_sensitive: bool = True,
    exists: bool = False,
    file_okay: bool = True,
    dir_okay: bool = True,
    metavar: str | None = None,
) -> Opt:
    """An option declaration, spelled as ``typer.Option`` is in ``Annotated[...]``."""
    return Opt(decls, help, envvar, min, max, case_sensitive, exists, file_okay, dir_okay, metavar)
