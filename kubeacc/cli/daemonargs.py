"""The long-running commands' options, read from their typer declarations without pydantic.

typer (>= 0.29) converts every option value through a pydantic ``TypeAdapter``: a daemon whose
command line typer parses imports pydantic and builds one validator per option, ~9 MB that stay
resident for the life of a node daemon which never validates anything with them again
(docs/dependencies.md). The daemons' command functions keep their typer declarations — the one
description of their options, which the full application still serves — and this module parses
a command line against those declarations with :mod:`argparse` and converts the values itself.

What it understands is what the daemons declare: ``str``, ``int``, ``float`` (``min`` /
``max``), ``bool`` (``--x/--no-x``, or the one flag the declaration names), ``Path``
(``exists``, ``file_okay``, ``dir_okay``), enums (``case_sensitive``), ``list[...]``
(repeatable), ``... | None``, ``envvar``. A declaration outside that raises
:class:`UnsupportedOption` when the command is read, so a new kind of option cannot be
parsed wrongly; ``tests/cli/test_daemonargs.py`` reads every daemon's command.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import os
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from typer.models import OptionInfo


class UnsupportedOption(TypeError):
    """A command declares an option this parser does not handle (a bug in kube-acc)."""


class UsageError(ValueError):
    """The command line is wrong; the message names the option and what is wrong with it."""


_SCALARS = (str, int, float, bool, Path)


@dataclass(frozen=True)
class Option:
    """One option of a command, as its typer declaration describes it."""

    name: str
    flags: tuple[str, ...]
    kind: type
    multiple: bool
    default: Any
    required: bool
    #: For a bool option: the flag that turns it off (``--no-x``), if it has one.
    negative: str | None
    info: OptionInfo

    @property
    def label(self) -> str:
        return "/".join(f for f in (self.flags[0], self.negative) if f)


def _option(param: inspect.Parameter, hint: Any) -> Option:
    if typing.get_origin(hint) is not typing.Annotated:
        raise UnsupportedOption(f"parameter {param.name}: not a typer.Option declaration")
    kind, *meta = typing.get_args(hint)
    infos = [m for m in meta if isinstance(m, OptionInfo)]
    if len(infos) != 1:
        raise UnsupportedOption(f"parameter {param.name}: not a typer.Option declaration")
    info = infos[0]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(rest) != 1:
            raise UnsupportedOption(f"parameter {param.name}: union {kind}")
        kind = rest[0]
    multiple = typing.get_origin(kind) is list
    if multiple:
        (kind,) = typing.get_args(kind)
    if not isinstance(kind, type) or not (issubclass(kind, (*_SCALARS, enum.Enum))):
        raise UnsupportedOption(f"parameter {param.name}: type {kind!r}")
    if multiple and kind is bool:
        raise UnsupportedOption(f"parameter {param.name}: a list of bools")
    # Inside Annotated, typer takes a string "default" for the option's first name.
    first = [info.default] if isinstance(info.default, str) else []
    if first == [] and info.default is not ...:
        raise UnsupportedOption(f"parameter {param.name}: a default in the declaration")
    if info.default_factory is not None or info.parser is not None:
        raise UnsupportedOption(f"parameter {param.name}: a default factory or parser")
    decls = [d for d in [*first, *(info.param_decls or ())] if d]
    negative = None
    if kind is bool and any("/" in d for d in decls):
        raise UnsupportedOption(f"parameter {param.name}: explicit on/off flags")
    if not decls:
        decls = ["--" + param.name.replace("_", "-")]
        if kind is bool:
            negative = "--no-" + param.name.replace("_", "-")
    decls.sort(key=lambda d: not d.startswith("--"))
    required = param.default is inspect.Parameter.empty
    return Option(
        name=param.name,
        flags=tuple(decls),
        kind=kind,
        multiple=multiple,
        default=None if required else param.default,
        required=required,
        negative=negative,
        info=info,
    )


def options(command: Callable[..., Any]) -> list[Option]:
    """The options ``command`` declares, in order; raises :class:`UnsupportedOption`."""
    hints = typing.get_type_hints(command, include_extras=True)
    return [_option(p, hints[p.name]) for p in inspect.signature(command).parameters.values()]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser(prog: str, command: Callable[..., Any], opts: list[Option]) -> _Parser:
    doc = inspect.getdoc(command) or ""
    parser = _Parser(prog=prog, description=doc, allow_abbrev=False)
    for opt in opts:
        help_text = (opt.info.help or "") + ("" if opt.required else f" [default: {opt.default}]")
        if opt.kind is bool:
            parser.add_argument(
                *opt.flags, dest=opt.name, action="store_true", default=None, help=help_text
            )
            if opt.negative:
                parser.add_argument(
                    opt.negative, dest=opt.name, action="store_false", help=argparse.SUPPRESS
                )
            continue
        parser.add_argument(
            *opt.flags,
            dest=opt.name,
            action="append" if opt.multiple else "store",
            default=None,
            metavar=opt.info.metavar or _metavar(opt.kind),
            help=help_text,
        )
    return parser


def _metavar(kind: type) -> str:
    if issubclass(kind, enum.Enum):
        return "[" + "|".join(str(m.value) for m in kind) + "]"
    return {int: "INTEGER", float: "FLOAT", Path: "PATH"}.get(kind, "TEXT")


def _convert(opt: Option, text: str) -> Any:
    where = f"Invalid value for '{opt.label}'"
    if issubclass(opt.kind, enum.Enum):
        for member in opt.kind:
            value = str(member.value)
            if text == value or (
                opt.info.case_sensitive is False and text.lower() == value.lower()
            ):
                return member
        choices = ", ".join(repr(str(m.value)) for m in opt.kind)
        raise UsageError(f"{where}: {text!r} is not one of {choices}.")
    if opt.kind in (int, float):
        try:
            number = opt.kind(text)
        except ValueError:
            what = "an integer" if opt.kind is int else "a float"
            raise UsageError(f"{where}: {text!r} is not {what}.") from None
        low, high = opt.info.min, opt.info.max
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = [f"x>={low}"] if low is not None else []
            bounds += [f"x<={high}"] if high is not None else []
            raise UsageError(f"{where}: {number} is not in the range {' and '.join(bounds)}.")
        return number
    if opt.kind is Path:
        path = Path(text)
        info = opt.info
        if info.exists and not path.exists():
            raise UsageError(f"{where}: Path {text!r} does not exist.")
        if path.exists() and info.dir_okay is False and path.is_dir():
            raise UsageError(f"{where}: Path {text!r} is a directory.")
        if path.exists() and info.file_okay is False and not path.is_dir():
            raise UsageError(f"{where}: Path {text!r} is a file.")
        return path
    return text


def _envvar(opt: Option) -> str | None:
    names = opt.info.envvar
    for name in [names] if isinstance(names, str) else list(names or ()):
        if os.environ.get(name):
            return os.environ[name]
    return None


def parse(command: Callable[..., Any], args: Sequence[str], prog: str) -> dict[str, Any]:
    """The keyword arguments to call ``command`` with for the command line ``args``.

    Raises :class:`UsageError` for a wrong command line; ``--help`` prints the options and
    leaves with status 0 (argparse's own exit).
    """
    opts = options(command)
    given = vars(_parser(prog, command, opts).parse_args(list(args)))
    out: dict[str, Any] = {}
    for opt in opts:
        raw = given[opt.name]
        if raw is None and (env := _envvar(opt)) is not None:
            raw = [env] if opt.multiple else env
        if raw is None:
            if opt.required:
                raise UsageError(f"Missing option '{opt.flags[0]}'.")
            out[opt.name] = opt.default
        elif opt.kind is bool:
            out[opt.name] = raw if isinstance(raw, bool) else _boolean(opt, str(raw))
        elif opt.multiple:
            out[opt.name] = [_convert(opt, v) for v in raw]
        else:
            out[opt.name] = _convert(opt, raw)
    return out


def _boolean(opt: Option, text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "y", "on", "t"):
        return True
    if value in ("0", "false", "no", "n", "off", "f"):
        return False
    raise UsageError(f"Invalid value for '{opt.label}': {text!r} is not a valid boolean.")
