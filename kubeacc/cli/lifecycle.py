"""``kubeacc controller``, ``kubeacc lifecycle-agent`` and ``kubeacc crds``."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from kubeacc.cli.hosts import (
    HostKind,
    HostKindOption,
    SimulateKernelOption,
    check_host_root,
    open_host,
)
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.options import ContextOption, HostRootOption, KubeconfigOption
from kubeacc.cli.probes import start_probes
from kubeacc.cli.signals import stop_on_signals
from kubeacc.discovery.nvml import NvmlMode


def controller_command(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    identity: Annotated[str | None, typer.Option(help="Leader-election identity")] = None,
    lease_namespace: Annotated[str, typer.Option()] = "kube-system",
    admin_namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--admin-namespace",
            metavar="NAMESPACE",
            help="Namespace whose AcceleratorOperations may target any device (repeatable; "
            "default: the Lease's namespace). Other namespaces need an AcceleratorPolicy "
            "allowedNamespaces grant. '*': every namespace (not for shared clusters).",
        ),
    ] = None,
    interval: Annotated[
        float,
        typer.Option(
            min=0.0, help="Minimum seconds between reconcile passes (changes are coalesced)"
        ),
    ] = 0.2,
    resync_seconds: Annotated[
        float, typer.Option(min=1.0, help="Full reconcile pass at least this often, changes or not")
    ] = 30.0,
    install_crds: Annotated[bool, typer.Option(help="Apply the CRDs at start")] = False,
    log_level: LogLevelOption = LogLevel.INFO,
    metrics_address: Annotated[
        str | None,
        typer.Option(help="Serve /metrics, /healthz, /readyz on HOST:PORT or :PORT (default: off)"),
    ] = None,
) -> None:
    """Run the controller: policies -> DeviceClasses, operations, inventory clean-up."""
    from kubeacc.clientconfig import make_client
    from kubeacc.controller.controller import Controller
    from kubeacc.controller.status import FIELD_MANAGER
    from kubeacc.crds.resources import install_crds as install

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
    try:
        controller.run(stop)
    finally:
        if probes is not None:
            probes.stop()


def lifecycle_agent_command(
    node_name: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name")],
    host_root: HostRootOption = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    bitstream_dir: Annotated[
        Path, typer.Option(help="Node-local library of FPGA bitstreams")
    ] = Path("/var/lib/kubeacc/bitstreams"),
    interval: Annotated[
        float,
        typer.Option(min=0.05, help="Seconds between discoveries of the host (operations wake it)"),
    ] = 1.0,
    resync_seconds: Annotated[
        float,
        typer.Option(min=1.0, help="Re-list and re-apply Accelerators and operations this often"),
    ] = 60.0,
    simulate_kernel: SimulateKernelOption = False,
    log_level: LogLevelOption = LogLevel.INFO,
    nvml: Annotated[
        NvmlMode, typer.Option(help="NVML for NVIDIA GPUs: auto, on (warn if unusable) or off")
    ] = NvmlMode.AUTO,
    metrics_address: Annotated[
        str | None,
        typer.Option(help="Serve /metrics, /healthz, /readyz on HOST:PORT or :PORT (default: off)"),
    ] = None,
) -> None:
    """Run the node side of the life cycle: Accelerator status and operations on this node."""
    from kubeacc.agent.lifecycle.agent import LifecycleAgent
    from kubeacc.clientconfig import make_client

    check_host_root(host_root)
    setup_logging(log_level)
    host = open_host(host_root, host_kind, simulate_kernel=simulate_kernel)
    agent = LifecycleAgent(
        make_client(kubeconfig, f"kubeacc-agent-{node_name}", context=context),
        node_name=node_name,
        host=host,
        bitstream_dir=bitstream_dir,
        interval=interval,
        resync_seconds=resync_seconds,
        nvml=nvml.value,
    )
    probes = start_probes(metrics_address, agent.metrics.registry, ready=agent.not_ready)
    try:
        agent.run(stop_on_signals(agent.wake))
    finally:
        if probes is not None:
            probes.stop()


def crds_command(
    write: Annotated[
        Path | None, typer.Option(help="Write one YAML file per CRD into this directory")
    ] = None,
) -> None:
    """Print (or write) the kubeacc.io CustomResourceDefinitions."""
    from kubeacc.crds.manifests import manifest_files
    from kubeacc.crds.manifests import write as write_files

    if write is not None:
        for path in write_files(write):
            typer.echo(str(path))
        return
    typer.echo("---\n".join(manifest_files().values()), nl=False)
