"""The ``kubeacc`` console script.

``kubeacc agent`` runs for the life of the node, so it loads only the agent's own modules; every
other command goes through the full application in :mod:`kubeacc.cli.main` (which also imports
the planner and the allocation engine, about 25 MB the agent never uses).
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["agent"]:
        import typer

        from kubeacc.cli.agent import agent_command
        from kubeacc.cli.errors import run_app

        agent_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        agent_app.command("agent")(agent_command)
        # A one-command typer app takes the command's options directly.
        run_app(agent_app, args=sys.argv[2:], prog_name="kubeacc agent")
    from kubeacc.cli.main import main as full

    full()


if __name__ == "__main__":
    main()
