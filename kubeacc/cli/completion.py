"""``kubeacc completion SHELL``: the shell completion script, as ``kubectl completion`` prints it.

typer's own ``--show-completion`` guesses the shell from the parent process (and fails where
there is none, e.g. in a Dockerfile ``RUN``); naming the shell works anywhere:
``kubeacc completion bash > /etc/bash_completion.d/kubeacc``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"
    POWERSHELL = "powershell"


def completion_command(
    shell: Annotated[
        Shell, typer.Argument(case_sensitive=False, help="bash, zsh, fish, powershell.")
    ],
) -> None:
    """Print the completion script for SHELL (e.g. source <(kubeacc completion bash))."""
    from typer.completion import get_completion_script  # type: ignore[attr-defined]

    script = get_completion_script(
        prog_name="kubeacc", complete_var="_KUBEACC_COMPLETE", shell=shell.value
    )
    typer.echo(script)
