"""The ``kubeacc`` command."""

from __future__ import annotations

from typing import Annotated

import typer

from kubeacc import __version__
from kubeacc.cli.agent import (
    agent_command,
    cleanup_command,
    install_classes_command,
    uninstall_check_command,
)
from kubeacc.cli.claim import claim_command
from kubeacc.cli.completion import completion_command
from kubeacc.cli.demo import demo_command
from kubeacc.cli.deviceplugin import device_plugin_command
from kubeacc.cli.discover import discover_command
from kubeacc.cli.errors import run_app
from kubeacc.cli.extender import extender_command
from kubeacc.cli.lifecycle import controller_command, crds_command, lifecycle_agent_command
from kubeacc.cli.plan import plan
from kubeacc.cli.selftest import selftest_command
from kubeacc.cli.status import status_command
from kubeacc.cli.top import top_command
from kubeacc.cli.typerize import typer_command

app = typer.Typer(
    name="kubeacc",
    help="kube-acc: one accelerator management system for Kubernetes.",
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """kube-acc: one accelerator management system for Kubernetes."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


app.command("discover")(typer_command(discover_command))
app.command("demo")(typer_command(demo_command))
app.command("plan")(typer_command(plan))
app.command("status")(typer_command(status_command))
app.command("claim")(typer_command(claim_command))
app.command("agent")(typer_command(agent_command))
app.command("install-classes")(typer_command(install_classes_command))
app.command("cleanup")(typer_command(cleanup_command))
app.command("uninstall-check")(typer_command(uninstall_check_command))
app.command("device-plugin")(typer_command(device_plugin_command))
app.command("controller")(typer_command(controller_command))
app.command("extender")(typer_command(extender_command))
app.command("lifecycle-agent")(typer_command(lifecycle_agent_command))
app.command("crds")(typer_command(crds_command))
app.command("selftest")(typer_command(selftest_command))
app.command("completion")(typer_command(completion_command))
app.command("top")(typer_command(top_command))


@app.command("schema")
def schema() -> None:
    """Print the JSON Schema of the inventory document (discover -o json)."""
    from kubeacc.model.schema import inventory_schema_json

    typer.echo(inventory_schema_json(), nl=False)


@app.command("version")
def version() -> None:
    """Print the kube-acc version."""
    typer.echo(__version__)


def main() -> None:
    run_app(app, prog_name="kubeacc")


if __name__ == "__main__":
    main()
