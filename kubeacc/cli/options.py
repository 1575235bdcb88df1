"""Options that several commands share, so each is spelled and documented once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        exists=True,
        dir_okay=False,
        help="Kubeconfig file (default: $KUBECONFIG, then the pod's service account, "
        "then ~/.kube/config).",
    ),
]
HostRootOption = Annotated[
    Path, typer.Option("--host-root", help="Root of the host's /sys, /dev and /proc.")
]
DeviceRootOption = Annotated[
    Path,
    typer.Option(
        "--device-root",
        help="Where the container runtime finds the device nodes (the /dev paths handed to "
        "containers and written to CDI specs as hostPath): / on a real node.",
    ),
]
