"""Parse a daemon's options with :mod:`argparse`, from the same ``typer.Option`` declarations.

SPIKE (issue 30, docs/notes/argv-spike.md): running a typer command converts every option value
through a pydantic ``TypeAdapter``, so each daemon start imports pydantic. This builds an
:class:`argparse.ArgumentParser` from the command function's signature instead: option names,
help text, defaults, ``min``/``max``, ``case_sensitive`` and ``envvar`` are read from the
``Annotated[..., typer.Option(...)]`` parameters, so they stay written once. Usage errors keep
typer's wording and exit code 2 (:mod:`kubeacc.cli.errors`).

Supported parameter types (what the daemons use): ``str``, ``int``, ``float``, ``bool``
(``--x/--no-x``), ``Path``, an ``Enum``, ``X | None`` and ``list[X] | None`` (repeatable).
Anything else raises :class:`TypeError` at start, so a new option cannot be silently misparsed.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types
import typing
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn

from typer.models import OptionInfo

USAGE = 2


class UsageError(Exception):
    """A bad command line: ``message`` in typer's wording; ``hint``: add the --help pointer."""

    def __init__(self, message: str, hint: bool = True) -> None:
        super().__init__(message)
        self.hint = hint


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _shown(names: Sequence[str]) -> str:
    return " / ".join(f"'{n}'" for n in names)


def _converter(tp: Any, info: OptionInfo, names: Sequence[str]) -> tuple[Callable[[str], Any], str]:
    """A converter raising typer's 'Invalid value' message, and the metavar for --help."""

    def invalid(text: str) -> NoReturn:
        raise argparse.ArgumentTypeError(f"Invalid value for {_shown(names)}: {text}")

    if isinstance(tp, type) and issubclass(tp, Enum):
        values = [str(m.value) for m in tp]
        enum_type: type[Enum] = tp

        def to_enum(raw: str) -> Any:
            for member in enum_type:
                value = str(member.value)
                if raw == value or (not info.case_sensitive and raw.lower() == value.lower()):
                    return member
            listed = ", ".join(f"'{v}'" for v in values)
            invalid(f"{raw!r} is not one of {listed}.")

        return to_enum, "<" + "|".join(values) + ">"
    if tp in (int, float):
        number: type[int] | type[float] = tp
        low, high = info.min, info.max

        def to_number(raw: str) -> Any:
            try:
                value = number(raw)
            except ValueError:
                kind = "an integer" if number is int else "a number"
                invalid(
                    f"Input should be a valid {number.__name__ if number is int else 'number'}"
                    f", unable to parse string as {kind}"
                )
            if low is not None and value < low:
                invalid(f"Input should be greater than or equal to {low}")
            if high is not None and value > high:
                invalid(f"Input should be less than or equal to {high}")
            return value

        bounds = []
        if low is not None:
            bounds.append(f"x>={low}")
        if high is not None:
            bounds.append(f"x<={high}")
        return to_number, f"<{number.__name__}{' ' + ' '.join(bounds) if bounds else ''}>"
    if tp is Path:

        def to_path(raw: str) -> Path:
            path = Path(raw)
            if info.exists and not path.exists():
                invalid(f"file {raw!r} does not exist.")
            if not info.dir_okay and path.is_dir():
                invalid(f"file {raw!r} is a directory.")
            if not info.file_okay and path.is_file():
                invalid(f"directory {raw!r} is a file.")
            return path

        return to_path, "<path>"
    if tp is str:
        return str, "<str>"
    raise TypeError(f"argv: option {names[0]} has a type this parser does not handle: {tp!r}")


def build_parser(function: Callable[..., Any], prog: str) -> argparse.ArgumentParser:
    """An argparse parser for ``function``'s typer-declared keyword options."""
    hints = typing.get_type_hints(function, include_extras=True)
    doc = inspect.getdoc(function) or ""
    parser = _Parser(
        prog=prog,
        description=doc,
        add_help=False,  # typer's is --help only
        allow_abbrev=False,  # click takes no abbreviations
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser._optionals.title = "options"
    parser.add_argument("--help", action="help", help="Show this message and exit.")
    for name, param in inspect.signature(function).parameters.items():
        annotated = hints[name]
        if typing.get_origin(annotated) is not typing.Annotated:
            raise TypeError(f"argv: parameter {name} is not Annotated[..., typer.Option()]")
        tp, *extras = typing.get_args(annotated)
        info = next((e for e in extras if isinstance(e, OptionInfo)), None)
        if info is None:
            raise TypeError(f"argv: parameter {name} has no typer.Option")
        decls = [d for d in (info.default, *(info.param_decls or ())) if isinstance(d, str)]
        if not decls or not decls[0].startswith("-"):
            decls = ["--" + name.replace("_", "-"), *decls]
        required = param.default is inspect.Parameter.empty
        default = None if required else param.default
        if info.envvar:
            import os

            env = info.envvar if isinstance(info.envvar, str) else info.envvar[0]
            if os.environ.get(env):
                default, required = os.environ[env], False
        help_text = info.help or ""
        inner, _optional = _strip_optional(tp)
        if inner is bool:
            # typer: an undeclared bool is the pair --x/--no-x, a declared one a plain flag.
            if len(decls) != 1 or "/" in decls[0]:
                raise TypeError(f"argv: bool option {decls} needs its own spelling here")
            explicit = any(isinstance(d, str) for d in (info.default, *(info.param_decls or ())))
            parser.add_argument(
                decls[0],
                dest=name,
                action="store_true" if explicit else argparse.BooleanOptionalAction,
                default=bool(default),
                help=f"{help_text} [default: {'' if default else 'no-'}{decls[0][2:]}]",
            )
            continue
        repeat = typing.get_origin(inner) is list
        item = typing.get_args(inner)[0] if repeat else inner
        convert, metavar = _converter(item, info, decls)
        if repeat:
            metavar = f"<list[{metavar.strip('<>')}]>"
        if info.metavar:
            metavar = info.metavar
        shown = default.value if isinstance(default, Enum) else default
        if shown is not None and not repeat:
            help_text += f" [default: {shown}]"
        if info.envvar:
            help_text += f" [env var: {info.envvar}]"
        if required:
            help_text += " [required]"
        action = parser.add_argument(
            *decls,
            dest=name,
            type=convert,
            default=default,
            action="append" if repeat else "store",
            metavar=metavar,
            required=required,
            help=help_text,
        )
        action.envvar = info.envvar  # type: ignore[attr-defined]  # for the missing-option error
    return parser


def _typer_wording(message: str, parser: argparse.ArgumentParser) -> UsageError:
    """argparse's message for a bad command line, in the words typer used for it."""
    if message.startswith("argument ") and ": Invalid value for " in message:
        return UsageError(message.split(": ", 1)[1])
    if message.startswith("argument ") and message.endswith("expected one argument"):
        option = message[len("argument ") :].split(":", 1)[0].split("/", maxsplit=1)[0]
        return UsageError(f"Option '{option}' requires an argument.", hint=False)
    if message.startswith("the following arguments are required: "):
        option = message.split(": ", 1)[1].split(",", maxsplit=1)[0].split("/", maxsplit=1)[0]
        for action in parser._actions:
            envvar = getattr(action, "envvar", None)
            if option in action.option_strings and envvar:
                return UsageError(f"Missing option '{option}' (env var: '{envvar}').")
        return UsageError(f"Missing option '{option}'.")
    return UsageError(message)


def parse(function: Callable[..., Any], args: Sequence[str], prog: str) -> dict[str, Any]:
    """``function``'s keyword arguments from ``args``; :class:`UsageError` for a bad one."""
    parser = build_parser(function, prog)
    try:
        known, extra = parser.parse_known_args(list(args))
    except UsageError as err:
        raise _typer_wording(str(err), parser) from None
    options = [a for a in extra if a.startswith("-")]
    if options:
        raise UsageError(f"No such option: {options[0].split('=', 1)[0]}")
    if extra:
        raise UsageError(f"Got unexpected extra argument(s) ({' '.join(extra)})")
    return vars(known)


def run(
    function: Callable[..., Any],
    args: Sequence[str],
    prog: str,
    slow_path: Callable[[], NoReturn] | None = None,
) -> NoReturn:
    """Parse ``args`` for ``function`` and run it, ending the way :func:`errors.run_app` does.

    ``slow_path``: what answers ``--help`` and a bad command line instead (typer's own command,
    so both stay exactly as they were); neither is on the way to a running daemon.
    """
    import typer

    from kubeacc.cli.errors import FAILURE, describe

    if slow_path is not None and "--help" in args:
        slow_path()
    try:
        kwargs = parse(function, args, prog)
    except UsageError as err:
        if slow_path is not None:
            slow_path()
        hint = f" (see '{prog} --help')" if err.hint else ""
        print(f"error: {err}{hint}", file=sys.stderr)
        sys.exit(USAGE)
    try:
        code = function(**kwargs)
    except typer.Exit as exc:  # fail() and friends
        sys.exit(exc.exit_code)
    except Exception as exc:
        line = describe(exc)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(FAILURE)
    sys.exit(code if isinstance(code, int) else 0)
