"""Parse a long-running command's options with :mod:`argparse`, from their declarations.

Running a typer command converts every option value through a pydantic ``TypeAdapter``: each
daemon start would import typer and pydantic and build one adapter per option
(docs/benchmarks.md, "Daemon start"). The daemons (:mod:`kubeacc.cli.entry`) parse with an
:class:`argparse.ArgumentParser` built from the command function's
``Annotated[..., option(...)]`` parameters (:mod:`kubeacc.cli.declare`) instead, the same
declarations the full CLI hands to typer, so each option is still declared once.

The parser is strict on purpose: it accepts only what it reads exactly as typer would (a number
in plain decimal notation, an enum value as declared, a path that passes typer's checks) and
raises :class:`UsageError` for everything else. The caller then hands the whole command line to
the typer command, which answers it in its own words (help, error, or a value only typer's
parser takes, such as ``--context -x``): no wording is copied here, so none can drift.

Supported parameter types (what the daemons use): ``str``, ``int``, ``float``, ``bool``
(``--x/--no-x``, or a plain flag when declared by name), ``Path``, an ``Enum``, ``X | None``
and ``list[X] | None`` (repeatable). A type outside this list, or an option declared any other
way, raises :class:`TypeError` when the parser is built, so it cannot be misparsed silently.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import stat
import sys
import types
import typing
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

from kubeacc.cli.declare import Opt

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class UsageError(Exception):
    """A command line this parser does not take; the typer command answers it instead."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _strip_optional(tp: Any) -> Any:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _invalid(text: str) -> NoReturn:
    raise argparse.ArgumentTypeError(text)


def _enum(tp: type[Enum], case_sensitive: bool) -> Callable[[str], Any]:
    def convert(raw: str) -> Any:
        for member in tp:
            value = str(member.value)
            if raw == value or (not case_sensitive and raw.lower() == value.lower()):
                return member
        _invalid(f"{raw!r} is not one of {[str(m.value) for m in tp]}")

    return convert


def _number(tp: type[int] | type[float], opt: Opt) -> Callable[[str], Any]:
    syntax = _INT if tp is int else _FLOAT

    def convert(raw: str) -> Any:
        if not syntax.fullmatch(raw):
            _invalid(f"{raw!r} is not a plain {tp.__name__}")
        value = tp(raw)
        if opt.min is not None and value < opt.min:
            _invalid(f"{value} is below {opt.min}")
        if opt.max is not None and value > opt.max:
            _invalid(f"{value} is above {opt.max}")
        return value

    return convert


def _path(opt: Opt) -> Callable[[str], Path]:
    """typer's checks of a path value (exists, file_okay, dir_okay; readable, its default)."""

    def convert(raw: str) -> Path:
        if not raw:
            _invalid("an empty path")
        try:
            st = os.stat(raw)
        except OSError:
            if opt.exists:
                _invalid(f"{raw!r} does not exist")
            return Path(raw)
        if not opt.file_okay and stat.S_ISREG(st.st_mode):
            _invalid(f"{raw!r} is a file")
        if not opt.dir_okay and stat.S_ISDIR(st.st_mode):
            _invalid(f"{raw!r} is a directory")
        if not os.access(raw, os.R_OK):
            _invalid(f"{raw!r} is not readable")
        return Path(raw)

    return convert


def _converter(tp: Any, opt: Opt, option: str) -> Callable[[str], Any]:
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _enum(tp, opt.case_sensitive)
    if tp in (int, float):
        return _number(tp, opt)
    if tp is Path:
        return _path(opt)
    if tp is str:
        return str
    raise TypeError(f"argv: option {option} has a type this parser does not handle: {tp!r}")


def _option(name: str, annotated: Any) -> tuple[Any, Opt]:
    if typing.get_origin(annotated) is not typing.Annotated:
        raise TypeError(f"argv: parameter {name} is not Annotated[..., option()]")
    tp, *extras = typing.get_args(annotated)
    opt = next((e for e in extras if isinstance(e, Opt)), None)
    if opt is None:  # a typer.Option, say: its other settings could change what a value means
        raise TypeError(f"argv: parameter {name} is not declared with kubeacc.cli.declare.option")
    return tp, opt


def build_parser(function: Callable[..., Any]) -> argparse.ArgumentParser:
    """An argparse parser for ``function``'s declared keyword options.

    It has no help: ``--help`` is typer's (the caller sends it there, :func:`run`).
    """
    hints = typing.get_type_hints(function, include_extras=True)
    parser = _Parser(add_help=False, allow_abbrev=False)  # click takes no abbreviations
    for name, param in inspect.signature(function).parameters.items():
        tp, opt = _option(name, hints[name])
        decls = list(opt.decls) or ["--" + name.replace("_", "-")]
        required = param.default is inspect.Parameter.empty
        default = None if required else param.default
        envvar = opt.envvar
        if envvar and os.environ.get(envvar):  # click: an empty variable is unset
            default, required = os.environ[envvar], False
        inner = _strip_optional(tp)
        if inner is bool:
            # typer: an undeclared bool is the pair --x/--no-x, a declared one a plain flag.
            if len(decls) != 1 or "/" in decls[0] or envvar or required:
                raise TypeError(f"argv: bool option {decls} needs its own spelling here")
            parser.add_argument(
                decls[0],
                dest=name,
                action="store_true" if opt.decls else argparse.BooleanOptionalAction,
                default=bool(default),
            )
            continue
        repeat = typing.get_origin(inner) is list
        if repeat and (default is not None or envvar):
            raise TypeError(f"argv: repeatable option {decls[0]} needs default None, no envvar")
        item = typing.get_args(inner)[0] if repeat else inner
        parser.add_argument(
            *decls,
            dest=name,
            type=_converter(item, opt, decls[0]),
            default=default,
            action="append" if repeat else "store",
            required=required,
        )
    return parser


def parse(function: Callable[..., Any], args: Sequence[str]) -> dict[str, Any]:
    """``function``'s keyword arguments from ``args``; :class:`UsageError` when not taken."""
    if any(a == "--help" for a in args):
        raise UsageError("--help is typer's")
    if any(re.match(r"-[^-]=", a) for a in args):
        raise UsageError("a short option with '=' (click reads the '=' as part of the value)")
    return vars(build_parser(function).parse_args(list(args)))


def run(
    function: Callable[..., Any], args: Sequence[str], typer_path: Callable[[], NoReturn]
) -> NoReturn:
    """Parse ``args`` for ``function`` and run it, ending the way the typer command would.

    ``typer_path`` answers what :func:`parse` does not take: ``--help`` and every bad command
    line (typer's own command, so both read exactly as before); neither is on the way to a
    running daemon. The rest mirrors :func:`kubeacc.cli.errors.run_app` around typer's
    ``main``: Ctrl-C leaves with 130, a failure the user can act on is one line and exit 1
    (:func:`~kubeacc.cli.errors.fail` is a ``SystemExit`` and needs nothing here).
    """
    try:
        kwargs: dict[str, Any] | None = parse(function, args)
    except UsageError:
        kwargs = None
    if kwargs is None:  # outside the except: typer's answer is not "during" a parse error
        typer_path()
    from kubeacc.cli.errors import exit_with, fail_with

    try:
        code = function(**kwargs)
    except KeyboardInterrupt:
        sys.exit(130)
    except EOFError:
        print("", file=sys.stderr)
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        fail_with(exc)
    exit_with(code)
