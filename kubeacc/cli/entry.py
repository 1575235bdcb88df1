"""The ``kubeacc`` console script.

The long-running commands (:data:`DAEMONS`) run for the life of a node or a control plane and
restart on every upgrade, so each starts through a path that loads only its own module: no
terminal UI, no planner, no allocation engine, and its options parsed without typer's command
machinery (:func:`run_daemon`). Every other command goes through
the full application in :mod:`kubeacc.cli.main`. ``tests/cli/test_entry_imports.py`` holds each
daemon to this, and ``bench/daemon_start.py`` measures what it costs.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import NoReturn

#: Command -> (module, function) of each long-running command.
DAEMONS: dict[str, tuple[str, str]] = {
    "agent": ("kubeacc.cli.agent", "agent_command"),
    "device-plugin": ("kubeacc.cli.deviceplugin", "device_plugin_command"),
    "lifecycle-agent": ("kubeacc.cli.lifecycle", "lifecycle_agent_command"),
    "controller": ("kubeacc.cli.controller", "controller_command"),
    "extender": ("kubeacc.cli.extender", "extender_command"),
}

#: Commands that start with the cyclic garbage collector off: their start-up ends, once
#: serving, in :func:`kubeacc.gcfreeze.freeze_startup`, which collects what the start left,
#: freezes the rest and turns the collector back on. Until then it would walk the growing heap
#: of freshly imported modules about 80 times (~20 ms of the device plugin's start to
#: registered) and find next to nothing to free.
GC_OFF_UNTIL_FROZEN = frozenset({"device-plugin"})


def run_daemon(name: str, args: list[str]) -> NoReturn:
    """Run the long-running command ``name`` with its options ``args``.

    Its options are parsed by :mod:`kubeacc.cli.argv` (no typer, no pydantic); ``--help``
    and a command line that parser does not take go to the one-command typer application, so
    help and usage errors read exactly as the full application's.
    """
    if name in GC_OFF_UNTIL_FROZEN:
        gc.disable()
    from kubeacc.cli import argv

    module, function = DAEMONS[name]
    command = getattr(importlib.import_module(module), function)
    argv.run(command, args, lambda: _run_typer(name, args))


def _run_typer(name: str, args: list[str]) -> NoReturn:
    import typer

    from kubeacc.cli.errors import run_app

    module, function = DAEMONS[name]
    from kubeacc.cli.typerize import typer_command

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(name)(typer_command(getattr(importlib.import_module(module), function)))
    # A one-command typer app takes the command's options directly.
    run_app(app, args=args, prog_name=f"kubeacc {name}")


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in DAEMONS:
        run_daemon(command, sys.argv[2:])
    from kubeacc.cli.main import main as full

    full()


if __name__ == "__main__":
    main()
