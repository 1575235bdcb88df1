"""Commands declared with :func:`kubeacc.cli.declare.option`, as typer reads them.

typer reads a command's options from its signature. :func:`typer_command` gives it a wrapper
whose signature carries, for each :class:`~kubeacc.cli.declare.Opt`, the ``typer.Option`` it
stands for (other annotations unchanged). Only the full CLI and the daemons' ``--help`` /
usage-error path (kubeacc/cli/entry.py) import this, and with it typer.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from kubeacc.cli.declare import Opt


def typer_option(opt: Opt) -> Any:
    """The ``typer.Option`` ``opt`` stands for."""
    return typer.Option(
        *opt.decls,
        help=opt.help,
        envvar=opt.envvar,
        min=opt.min,
        max=opt.max,
        case_sensitive=opt.case_sensitive,
        exists=opt.exists,
        file_okay=opt.file_okay,
        dir_okay=opt.dir_okay,
        metavar=opt.metavar,
    )


def _annotation(hint: Any) -> Any:
    if typing.get_origin(hint) is not Annotated:
        return hint
    tp, *extras = typing.get_args(hint)
    if not any(isinstance(e, Opt) for e in extras):
        return hint
    converted = [typer_option(e) if isinstance(e, Opt) else e for e in extras]
    return Annotated[tuple([tp, *converted])]


def typer_command(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with typer options for its :func:`~kubeacc.cli.declare.option` ones
    (``function`` itself when it has none)."""
    hints = typing.get_type_hints(function, include_extras=True)
    signature = inspect.signature(function)
    params = [
        p.replace(annotation=_annotation(hints[p.name])) for p in signature.parameters.values()
    ]
    if all(p.annotation is hints[p.name] for p in params):
        return function

    @functools.wraps(function)
    def command(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    annotations: dict[str, Any] = {p.name: p.annotation for p in params}
    if "return" in hints:
        annotations["return"] = hints["return"]
    command.__annotations__ = annotations
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=annotations.get("return", signature.empty)
    )
    return command
