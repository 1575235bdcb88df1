"""``kubeacc controller``: policies to DeviceClasses, operations, inventory clean-up.

A module of its own so that the controller starts without the host and discovery modules the
node commands next to it need (kubeacc/cli/entry.py).
"""

from __future__ import annotations

import os
import socket
from typing import Annotated

from kubeacc.cli.declare import option
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.options import ContextOption, KubeconfigOption, MetricsAddressOption
from kubeacc.cli.probes import start_probes
from kubeacc.cli.signals import stop_on_signals


def controller_command(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    identity: Annotated[str | None, option(help="Leader-election identity")] = None,
    lease_namespace: Annotated[str, option()] = "kube-system",
    admin_namespace: Annotated[
        list[str] | None,
        option(
            "--admin-namespace",
            metavar="NAMESPACE",
            help="Namespace whose AcceleratorOperations may target any device (repeatable; "
            "default: the Lease's namespace). Other namespaces need an AcceleratorPolicy "
            "allowedNamespaces grant. '*': every namespace (not for shared clusters).",
        ),
    ] = None,
    interval: Annotated[
        float,
        option(min=0.0, help="Minimum seconds between reconcile passes (changes are coalesced)"),
    ] = 0.2,
    resync_seconds: Annotated[
        float, option(min=1.0, help="Full reconcile pass at least this often, changes or not")
    ] = 30.0,
    install_crds: Annotated[bool, option(help="Apply the CRDs at start")] = False,
    log_level: LogLevelOption = LogLevel.INFO,
    metrics_address: MetricsAddressOption = None,
) -> None:
    """Run the controller: policies -> DeviceClasses, operations, inventory clean-up."""
    from kubeacc.clientconfig import make_client
    from kubeacc.controller.controller import Controller
    from kubeacc.controller.status import FIELD_MANAGER
    from kubeacc.crds.resources import install_crds as install
    from kubeacc.gcfreeze import freeze_startup

    setup_logging(log_level)
    stop = stop_on_signals()
    client = make_client(kubeconfig, FIELD_MANAGER, context=context)
    who = identity or f"{socket.gethostname()}-{os.getpid()}"
    controller = Controller(
        client,
        identity=who,
        lease_namespace=lease_namespace,
        interval=interval,
        resync_seconds=resync_seconds,
        admin_namespaces=admin_namespace,
    )
    probes = start_probes(
        metrics_address,
        controller.metrics.registry,
        healthy=controller.failing_health,
        ready=controller.not_ready,
    )
    if install_crds:
        install(client)
    freeze_startup("controller")
    try:
        controller.run(stop)
    finally:
        if probes is not None:
            probes.stop()
