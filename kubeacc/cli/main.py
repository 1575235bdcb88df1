"""The ``kubeacc`` command."""

from __future__ import annotations

import typer

from kubeacc import __version__
from kubeacc.cli.agent import agent_command, install_classes_command
from kubeacc.cli.demo import demo_command
from kubeacc.cli.deviceplugin import device_plugin_command
from kubeacc.cli.discover import discover_command
from kubeacc.cli.lifecycle import controller_command, crds_command, lifecycle_agent_command
from kubeacc.cli.plan import plan

app = typer.Typer(
    name="kubeacc",
    help="kube-acc: one accelerator management system for Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("discover")(discover_command)
app.command("demo")(demo_command)
app.command("plan")(plan)
app.command("agent")(agent_command)
app.command("install-classes")(install_classes_command)
app.command("device-plugin")(device_plugin_command)
app.command("controller")(controller_command)
app.command("lifecycle-agent")(lifecycle_agent_command)
app.command("crds")(crds_command)


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
    app()


if __name__ == "__main__":
    main()
