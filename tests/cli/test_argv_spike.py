"""SPIKE (docs/notes/argv-spike.md): the argparse parser built from a daemon's typer declarations
accepts the same options, with the same defaults, as typer's own command (all five daemons,
though only the device plugin runs through it), and parses the same
command lines to the same values."""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

from kubeacc.cli import argv
from kubeacc.cli.deviceplugin import device_plugin_command
from kubeacc.cli.entry import ARGPARSE, DAEMONS


def test_device_plugin_goes_through_argparse() -> None:
    assert "device-plugin" in ARGPARSE


def _typer_options(
    function: Callable[..., Any],
) -> dict[str, tuple[tuple[str, ...], object, bool, bool]]:
    app = typer.Typer(add_completion=False)
    app.command()(function)
    command = typer.main.get_command(app)
    return {
        p.name: (tuple(sorted(p.opts + p.secondary_opts)), p.default, p.multiple, p.required)
        for p in command.params
        if p.name
    }


def _argparse_options(
    function: Callable[..., Any],
) -> dict[str, tuple[tuple[str, ...], object, bool, bool]]:
    parser = argv.build_parser(function, "kubeacc x")
    return {
        a.dest: (
            tuple(sorted(a.option_strings)),
            a.default,
            isinstance(a, argparse._AppendAction),
            a.required,
        )
        for a in parser._actions
        if a.dest != "help"
    }


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_same_options_and_defaults_as_typer(name: str) -> None:
    import importlib

    module, function = DAEMONS[name]
    command = getattr(importlib.import_module(module), function)
    assert _argparse_options(command) == _typer_options(command)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--host-root", "/x", "--host", "synthetic", "-t", "gpu", "--type=fpga"],
        ["--interval", "0.5", "--log-level", "WARNING", "--metrics-address", ":9"],
        ["--config", "c.yaml", "--plugin-dir=/p", "--cdi-dir", "/c", "--nvml", "off"],
    ],
)
def test_same_values_as_typer(args: list[str]) -> None:
    seen: dict[str, object] = {}

    @functools.wraps(device_plugin_command)
    def record(**kwargs: object) -> None:
        seen.update(kwargs)

    app = typer.Typer(add_completion=False)
    app.command()(record)
    app(args=args, standalone_mode=False)
    ours = argv.parse(device_plugin_command, args, "kubeacc device-plugin")
    assert ours == seen
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in seen.items()}
    assert [type(t) for t in ours["types"] or []] == [type(t) for t in seen["types"] or []]  # type: ignore[attr-defined]
    assert isinstance(ours["host_root"], Path)


@pytest.mark.parametrize(
    "args",
    [
        ["--interval", "0"],
        ["--interval=x"],
        ["--log-level", "loud"],
        ["--host", "bad"],
        ["-t", "foo"],
        ["--nosuch"],
        ["--plugin-dir"],
        ["extra"],
        ["--host-root", "/nonexistent-root"],
    ],
)
def test_argparse_errors_read_as_typer_s(args: list[str]) -> None:
    """Without the typer fallback, argparse's own usage errors still read as typer's, exit 2."""
    kubeacc = str(Path(sys.executable).parent / "kubeacc")
    runs = [
        subprocess.run(
            [kubeacc, "device-plugin", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBEACC_ARGV_TYPER_FALLBACK": flag},
            check=False,
        )
        for flag in ("0", "1")
    ]
    ours, typers = ((r.returncode, r.stderr) for r in runs)
    assert ours == typers
    assert runs[0].returncode == 2
