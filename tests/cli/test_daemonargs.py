"""The daemons' options read without typer's conversion (kubeacc/cli/daemonargs.py).

typer itself is the reference: every daemon's command line, with each option given, must come
out of :func:`daemonargs.parse` as the same keyword arguments typer would call the command with.
"""

from __future__ import annotations

import enum
import functools
import importlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer

from kubeacc.cli import daemonargs
from kubeacc.cli.entry import DAEMONS


def _command(name: str) -> Callable[..., Any]:
    module, function = DAEMONS[name]
    command: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return command


def _typer_kwargs(command: Callable[..., Any], args: list[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    @functools.wraps(command)
    def capture(**kwargs: Any) -> None:
        seen.update(kwargs)

    app = typer.Typer(add_completion=False)
    app.command()(capture)
    typer.main.get_command(app).main(args, standalone_mode=False)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in seen.items()}


def _value(opt: daemonargs.Option, tmp: Path, second: bool = False) -> str:
    kind = opt.kind
    if issubclass(kind, enum.Enum):
        member = list(kind)[0 if second else -1]
        text = str(member.value)
        return text.upper() if opt.info.case_sensitive is False else text
    if kind is int:
        return str(int(opt.info.min or 0) + 3)
    if kind is float:
        return str(float(opt.info.min or 0) + 2.5)
    if kind is Path:
        path = tmp / f"{opt.name}{'-2' if second else ''}"
        path.write_text("x")  # a file satisfies exists=True and dir_okay=False
        return str(path)
    return f"{opt.name}-value{'-2' if second else ''}"


def _every_option(opts: list[daemonargs.Option], tmp: Path) -> list[str]:
    args: list[str] = []
    for opt in opts:
        if opt.kind is bool:
            args.append(opt.negative or opt.flags[0])
            continue
        args += [opt.flags[-1], _value(opt, tmp)]
        if opt.multiple:
            args += [opt.flags[0], _value(opt, tmp, second=True)]
    return args


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_every_daemon_parses_as_typer_does(name: str, tmp_path: Path) -> None:
    command = _command(name)
    opts = daemonargs.options(command)
    required = [a for o in opts if o.required for a in (o.flags[0], "req")]
    every = _every_option(opts, tmp_path)
    for args in (required, every):
        ours = daemonargs.parse(command, args, f"kubeacc {name}")
        assert ours == _typer_kwargs(command, args), args
    # the check can fail: every option given is not the defaults
    assert daemonargs.parse(command, every, "x") != daemonargs.parse(command, required, "x")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node-name", "n", "--interval", "0.01"], "'--interval': 0.01 is not in the range"),
        (["--node-name", "n", "--interval", "61"], "x>=0.05 and x<=60"),
        (["--node-name", "n", "-c", "many"], "'--count': 'many' is not an integer"),
        (["--node-name", "n", "--config", "/nonexistent/k"], "does not exist"),
        (["--node-name", "n", "--config", "/"], "is a directory"),
        (["--node-name", "n", "--bogus"], "unrecognized arguments: --bogus"),
        (["--node-name", "n", "--interv", "3"], "unrecognized arguments"),
        ([], "Missing option '--node-name'"),
    ],
)
def test_a_wrong_command_line_names_the_option(args: list[str], message: str) -> None:
    def sample(
        node_name: Annotated[str, typer.Option(help="Node.")],
        interval: Annotated[float, typer.Option(min=0.05, max=60)] = 5.0,
        count: Annotated[int, typer.Option("--count", "-c", min=1)] = 1,
        config: Annotated[Path | None, typer.Option(exists=True, dir_okay=False)] = None,
    ) -> None:
        """A sample command."""

    with pytest.raises(daemonargs.UsageError, match=message):
        daemonargs.parse(sample, args, "sample")


def test_an_unknown_enum_value_lists_the_choices() -> None:
    with pytest.raises(daemonargs.UsageError, match="'--log-level': 'loud' is not one of"):
        daemonargs.parse(_command("device-plugin"), ["--log-level", "loud"], "x")
    parsed = daemonargs.parse(_command("device-plugin"), ["--log-level", "DEBUG"], "x")
    assert parsed["log_level"].value == "debug"  # --log-level is case-insensitive


def test_the_environment_fills_an_option_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert daemonargs.parse(_command("agent"), [], "x")["node_name"] == "from-env"
    assert daemonargs.parse(_command("agent"), ["--node-name", "a"], "x")["node_name"] == "a"


def test_a_declaration_it_cannot_parse_is_refused() -> None:
    def odd(flags: Annotated[list[bool], typer.Option()]) -> None: ...

    def plain(value: int = 1) -> None: ...

    with pytest.raises(daemonargs.UnsupportedOption, match="flags: a list of bools"):
        daemonargs.options(odd)
    with pytest.raises(daemonargs.UnsupportedOption, match=r"value: not a typer\.Option"):
        daemonargs.options(plain)


def test_the_console_script_gives_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kubeacc.cli", "agent", "--node-name=n", "--compact-after=0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: Invalid value for '--compact-after': 0 is not in the range x>=1. "
        "(see 'kubeacc agent --help')"
    ]


def test_help_lists_the_options_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kubeacc.cli", "device-plugin", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "--plugin-dir" in done.stdout
    assert "The kubelet's device-plugin directory" in done.stdout
