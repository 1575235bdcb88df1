"""``kubeacc selftest``: check a node's driver user space and kube-acc's CDI specs against the
host, and print a report to attach to a bug (exit 1 when a check fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kubeacc.cli.hosts import HostKind, HostKindOption, open_host
from kubeacc.cli.options import HostRootOption


def selftest_command(
    host_root: HostRootOption = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    driver_root: Annotated[
        str, typer.Option(help="The NVIDIA driver root, a host path (as the agent's).")
    ] = "/",
    runtime_driver_root: Annotated[
        Path | None,
        typer.Option(help="The driver root as the container runtime sees it (as the agent's)."),
    ] = None,
    cdi_dir: Annotated[Path, typer.Option(help="Where the agent writes CDI specs.")] = Path(
        "/var/run/cdi"
    ),
) -> None:
    """Check the NVIDIA driver user space and the CDI specs against this node."""
    from kubeacc.agent.userspace.conformance import report, spec_checks, user_space_checks
    from kubeacc.agent.userspace.provider import DriverUserSpace

    host = open_host(host_root, host_kind)
    us = DriverUserSpace(host, driver_root, runtime_root=runtime_driver_root)
    checks, version = user_space_checks(us)
    checks += spec_checks(cdi_dir, version)
    typer.echo(report(checks))
    raise typer.Exit(0 if all(c.ok for c in checks) else 1)
