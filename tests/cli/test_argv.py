"""The daemons' argparse path (kubeacc/cli/argv.py) reads every command line as typer would.

For each of the five long-running commands the parser built from the typer declarations has
typer's options, defaults, repeatability and required-ness; good command lines parse to the same
values of the same types; bad ones are refused by the parser and answered by the typer command
(same stderr, exit 2); and for tricky ones the parser either refuses (typer answers) or agrees
with typer. A declaration the parser cannot read exactly is refused when the parser is built.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
import typer.main
from typer.models import OptionInfo

from kubeacc.cli import argv
from kubeacc.cli.declare import option
from kubeacc.cli.entry import DAEMONS, _run_typer, run_daemon
from kubeacc.cli.typerize import typer_command

#: In command lines below: an existing file, an existing directory.
FILE, DIR = "{file}", "{dir}"


def _command(name: str) -> Callable[..., Any]:
    module, function = DAEMONS[name]
    command: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return command


def _fill(args: list[str], tmp_path: Path) -> list[str]:
    file = tmp_path / "file.yaml"
    file.write_text("{}\n")
    return [a.replace(FILE, str(file)).replace(DIR, str(tmp_path)) for a in args]


def _typer_values(function: Callable[..., Any], args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments typer's command calls ``function`` with; None when it refuses."""
    seen: dict[str, Any] = {}

    @functools.wraps(typer_command(function))
    def record(**kwargs: Any) -> None:
        seen.update(kwargs)

    app = typer.Typer(add_completion=False)
    app.command()(record)
    try:
        app(args=args, standalone_mode=False)
    except typer.TyperException:
        return None
    return seen


def _argv_values(function: Callable[..., Any], args: list[str]) -> dict[str, Any] | None:
    try:
        return argv.parse(function, args)
    except argv.UsageError:
        return None


def _types(values: dict[str, Any]) -> dict[str, object]:
    return {k: [type(x) for x in v] if isinstance(v, list) else type(v) for k, v in values.items()}


def _options(function: Callable[..., Any]) -> tuple[dict[str, object], dict[str, object]]:
    app = typer.Typer(add_completion=False)
    app.command()(typer_command(function))
    ours = {  # argparse's append action is the repeatable one
        a.dest: (
            tuple(sorted(a.option_strings)),
            a.default,
            isinstance(a, argparse._AppendAction),
            a.required,
        )
        for a in argv.build_parser(function)._actions
    }
    theirs = {
        p.name: (tuple(sorted(p.opts + p.secondary_opts)), p.default, p.multiple, p.required)
        for p in typer.main.get_command(app).params
        if p.name
    }
    return ours, theirs


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_same_options_and_defaults_as_typer(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    ours, theirs = _options(_command(name))
    assert ours == theirs


NODE = ["--node-name", "n"]
GOOD: list[tuple[str, list[str]]] = [
    ("agent", NODE),
    (
        "agent",
        [
            "--node-name=n",
            "--host-root",
            DIR,
            "--host",
            "synthetic",
            f"--kubeconfig={FILE}",
            "--context",
            "c",
            "--apply-classes",
            "--rediscover-interval",
            "0.5",
            "--no-kubelet-plugin",
            "--device-plugin-type",
            "gpu",
            "--device-plugin-type=nic",
            "--compact-after",
            "+7",
            "--log-level",
            "DEBUG",
            "--nvml",
            "off",
            "--dra-publish",
            "gpu",
            "--dra-publish",
            "vf",
            "--memory-shared",
            "all",
            "--telemetry-interval",
            "0",
            "--health-taints",
            "--driver-user-space",
            "toolkit",
            "--driver-root",
            "/run/nvidia/driver",
            "--units-table",
            FILE,
            "--bitstream-dir",
            "/nonexistent",
        ],
    ),
    (
        "agent",
        [
            *NODE,
            "--kubelet-plugin",
            "--no-node-labels",
            "--state-dir",
            "s",
        ],
    ),
    ("device-plugin", []),
    ("device-plugin", ["--host-root", "/x", "--host", "synthetic", "-t", "gpu", "--type=fpga"]),
    ("device-plugin", ["--interval", "0.5", "--log-level", "WARNING", "--metrics-address", ":9"]),
    (
        "device-plugin",
        ["--config", "c.yaml", "--plugin-dir=/p", "--cdi-dir", "/c", "--nvml", "off"],
    ),
    ("device-plugin", ["-tgpu", "-t", "nic", "--interval", "5e-1", "--interval", ".25"]),
    ("lifecycle-agent", NODE),
    (
        "lifecycle-agent",
        [*NODE, "--interval", "1e-1", "--resync-seconds", "1", "--simulate-kernel", "--nvml", "on"],
    ),
    ("lifecycle-agent", [*NODE, "--bitstream-dir", "/b", "--kubeconfig", FILE, "--host", "real"]),
    ("controller", []),
    (
        "controller",
        [
            "--identity",
            "me",
            "--lease-namespace",
            "ns",
            "--admin-namespace",
            "a",
            "--admin-namespace",
            "*",
            "--interval",
            "0",
            "--resync-seconds",
            "2.5",
            "--install-crds",
            "--log-level",
            "Warning",
            "--metrics-address",
            ":0",
        ],
    ),
    ("controller", ["--no-install-crds", "--context=", "--interval", "1."]),
    ("extender", []),
    (
        "extender",
        [
            "--address",
            "127.0.0.1:0",
            "--no-leader-elect",
            "--lease-duration",
            "2",
            "--tls-cert-file",
            FILE,
            "--tls-key-file",
            "/nonexistent",
            "--client-ca-file",
            FILE,
            "--insecure-http",
            "--probe-address",
            ":1",
        ],
    ),
    ("extender", ["--leader-elect", "--lease-duration", "007", "--units-table", FILE]),
]


@pytest.mark.parametrize(("name", "args"), GOOD)
def test_same_values_as_typer(
    name: str, args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    args = _fill(args, tmp_path)
    command = _command(name)
    ours = argv.parse(command, args)  # taken: this command line never reaches typer
    assert ours == _typer_values(command, args)
    assert _types(ours) == _types(_typer_values(command, args) or {})


@pytest.mark.parametrize("name", ["agent", "lifecycle-agent"])
def test_node_name_from_the_environment(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    command = _command(name)
    monkeypatch.setenv("NODE_NAME", "from-env")
    for args, expected in (([], "from-env"), (["--node-name", "flag"], "flag")):
        ours = argv.parse(command, args)
        assert ours["node_name"] == expected
        assert ours == _typer_values(command, args)
    monkeypatch.setenv("NODE_NAME", "")  # empty: unset, for click too
    assert _argv_values(command, []) is None
    assert _typer_values(command, []) is None


BAD: list[tuple[str, list[str]]] = [
    ("agent", []),  # --node-name is required (no NODE_NAME)
    ("agent", [*NODE, "--compact-after", "0"]),
    ("agent", [*NODE, "--kubeconfig", "/nonexistent"]),
    ("agent", [*NODE, "--kubeconfig", DIR]),
    ("agent", [*NODE, "--apply-classes=yes"]),
    ("agent", [*NODE, "--device-plugin-type", "tpu"]),
    ("agent", [*NODE, "--units-table", DIR]),
    ("device-plugin", ["--interval", "0"]),
    ("device-plugin", ["--interval=x"]),
    ("device-plugin", ["--log-level", "loud"]),
    ("device-plugin", ["--host", "bad"]),
    ("device-plugin", ["-t", "foo"]),
    ("device-plugin", ["--nosuch"]),
    ("device-plugin", ["--plugin-dir"]),
    ("device-plugin", ["extra"]),
    ("device-plugin", ["--host-roo", "/"]),  # no abbreviations
    ("lifecycle-agent", [*NODE, "--resync-seconds", "0.5"]),
    ("lifecycle-agent", [*NODE, "--nvml", "maybe"]),
    ("lifecycle-agent", ["--node-name"]),
    ("controller", ["--interval", "-1"]),
    ("controller", ["--install-crds", "x"]),
    ("controller", ["--no-such-flag"]),
    ("extender", ["--lease-duration", "1.5"]),
    ("extender", ["--lease-duration", "1"]),
    ("extender", ["--tls-cert-file", DIR]),
    ("extender", ["--insecure-http=1"]),
]


def _ended(run: Callable[[], object], capsys: pytest.CaptureFixture[str]) -> tuple[object, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        run()
    return ended.value.code, capsys.readouterr().err


@pytest.mark.parametrize(("name", "args"), BAD)
def test_bad_command_lines_are_typer_s_to_answer(
    name: str,
    args: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    args = _fill(args, tmp_path)
    with pytest.raises(argv.UsageError):  # argparse's own error path: the daemon never runs
        argv.parse(_command(name), args)
    code, stderr = _ended(lambda: run_daemon(name, args), capsys)
    assert (code, stderr) == _ended(lambda: _run_typer(name, args), capsys)
    assert code == 2
    assert stderr.startswith("error: ")


#: Command lines where argparse and click could part ways: the parser must refuse them (typer
#: answers) or agree with typer.
TRICKY: list[tuple[str, list[str]]] = [
    ("device-plugin", ["-t=gpu"]),
    ("device-plugin", ["--interval", "nan"]),
    ("device-plugin", ["--interval", "inf"]),
    ("device-plugin", ["--interval", "1_0"]),
    ("device-plugin", ["--interval", " 1"]),
    ("device-plugin", ["--interval", "\u0661"]),
    ("device-plugin", ["--interval", "-0.0"]),
    ("device-plugin", ["--nvml", "-x"]),
    ("device-plugin", ["--host-root", ""]),
    ("device-plugin", ["--", "x"]),
    ("device-plugin", ["--"]),
    ("device-plugin", ["--host", "SYNTHETIC"]),
    ("device-plugin", ["--log-level", "WaRnInG"]),
    ("device-plugin", ["--type", "GPU"]),
    ("device-plugin", ["--metrics-address", "--interval", "1"]),
    ("device-plugin", ["--help"]),
    ("agent", [*NODE, "--compact-after", "1.0"]),
    ("agent", [*NODE, "--compact-after", "1e3"]),
    ("agent", [*NODE, "--compact-after", "-5"]),
    ("agent", ["--node-name", ""]),
    ("agent", ["--node-name", "-n"]),
    ("agent", [*NODE, "--node-name", "m"]),
    ("agent", [*NODE, "--no-apply-classes"]),
    ("agent", [*NODE, "--kubelet-plugin=false"]),
    ("agent", [*NODE, "--dra-publish", "x", "--dra-publish=-y"]),
    ("lifecycle-agent", [*NODE, "--bitstream-dir="]),
    ("controller", ["--admin-namespace", "--identity", "x"]),
    ("controller", ["--interval", "+0"]),
    ("extender", ["--lease-duration", "0x10"]),
    ("extender", ["--lease-duration", "\u0663"]),
    ("extender", ["--address", "-"]),
]


@pytest.mark.parametrize(("name", "args"), TRICKY)
def test_tricky_command_lines_are_refused_or_read_as_typer_does(
    name: str, args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    command = _command(name)
    ours = _argv_values(command, args)
    if ours is not None:
        theirs = _typer_values(command, args)
        assert ours == theirs
        assert _types(ours) == _types(theirs or {})


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_help_is_typer_s(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as ours:
        run_daemon(name, ["--help"])
    help_text = capsys.readouterr().out
    with pytest.raises(SystemExit) as theirs:
        _run_typer(name, ["--help"])
    assert (ours.value.code, help_text) == (theirs.value.code, capsys.readouterr().out)
    assert "--log-level" in help_text


def _tuple(pair: Annotated[tuple[int, int] | None, option(help="A pair.")] = None) -> None: ...
def _mapping(labels: Annotated[dict[str, str] | None, option()] = None) -> None: ...
def _typer_declared(verbose: Annotated[int, typer.Option("-v", count=True)] = 0) -> None: ...
def _plain(name: str = "") -> None: ...
def _listed(names: Annotated[list[str], option()] = ["a"]) -> None: ...  # noqa: B006
def _env_flag(on: Annotated[bool, option(envvar="ON")] = False) -> None: ...
def _paired(on: Annotated[bool, option("--on/--off")] = False) -> None: ...


@pytest.mark.parametrize(
    "function", [_tuple, _mapping, _typer_declared, _plain, _listed, _env_flag, _paired]
)
def test_a_declaration_it_cannot_read_exactly_fails_at_start(
    function: Callable[..., Any],
) -> None:
    with pytest.raises(TypeError, match="argv: "):
        argv.build_parser(function)


def test_the_full_cli_reads_the_same_declarations_as_typer_options() -> None:
    """typerize hands typer exactly what an option() says: names, help, checks."""
    hints = typing.get_type_hints(typer_command(_command("agent")), include_extras=True)
    kubeconfig = typing.get_args(hints["kubeconfig"])[1]
    assert isinstance(kubeconfig, OptionInfo)
    assert (kubeconfig.default, kubeconfig.exists, kubeconfig.dir_okay) == (
        "--kubeconfig",
        True,
        False,
    )
    assert kubeconfig.help is not None and kubeconfig.help.startswith("Kubeconfig file")
    node_name = typing.get_args(hints["node_name"])[1]
    assert (node_name.envvar, node_name.help) == ("NODE_NAME", "This node's name.")
    assert typer_command(_plain) is _plain  # nothing to convert
