"""``kubeacc extender``: the kube-scheduler extender (filter, prioritize, bind over HTTP)."""

from __future__ import annotations

import os
import socket
from typing import Annotated

import typer

from kubeacc.cli.errors import fail
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.options import KubeconfigOption, UnitsTableOption, use_units_table
from kubeacc.cli.signals import stop_on_signals


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"--address must be HOST:PORT or :PORT, not {text!r}")
    return host or "0.0.0.0", int(port)


def extender_command(
    kubeconfig: KubeconfigOption = None,
    address: Annotated[
        str, typer.Option(help="Serve the verbs, /healthz and /readyz on HOST:PORT or :PORT.")
    ] = ":8888",
    leader_elect: Annotated[
        bool, typer.Option(help="Serve only while holding the Lease kubeacc-extender.")
    ] = True,
    identity: Annotated[str | None, typer.Option(help="Leader-election identity.")] = None,
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the Lease.")] = "kube-system",
    lease_duration: Annotated[
        int, typer.Option(min=2, help="Seconds a Lease holds without renewal.")
    ] = 15,
    units_table: UnitsTableOption = None,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Run the scheduler extender: GPU placement and memory sharing for device-plugin clusters.

    kube-scheduler calls it through a KubeSchedulerConfiguration `extenders` entry: urlPrefix
    here, verbs filter, prioritize and bind, nodeCacheCapable true (docs/extender.md).
    """
    from kubeacc.clientconfig import make_client
    from kubeacc.extender.kube import FIELD_MANAGER
    from kubeacc.extender.runner import ExtenderRunner, check_api

    host, port = _address(address)
    use_units_table(units_table)
    setup_logging(log_level)
    client = make_client(kubeconfig, FIELD_MANAGER, timeout=30)
    check_api(client)
    who = identity or f"{socket.gethostname()}-{os.getpid()}"
    try:
        runner = ExtenderRunner(
            client,
            host,
            port,
            identity=who,
            lease_namespace=lease_namespace,
            leader_elect=leader_elect,
            lease_duration=lease_duration,
        )
    except OSError as err:
        fail(f"cannot listen on {address}: {err.strerror or err}", code=1)
    stop = stop_on_signals()
    runner.run(stop)
