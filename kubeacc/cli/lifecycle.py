"""``kubeacc controller``, ``kubeacc lifecycle-agent`` and ``kubeacc crds``."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Annotated

import typer


def _client(kubeconfig: Path | None, field_manager: str):  # type: ignore[no-untyped-def]
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig

    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return Client(config, field_manager=field_manager)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def controller_command(
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig; default: in-cluster")] = None,
    identity: Annotated[str | None, typer.Option(help="Leader-election identity")] = None,
    lease_namespace: Annotated[str, typer.Option()] = "kube-system",
    interval: Annotated[
        float,
        typer.Option(help="Minimum seconds between reconcile passes (changes are coalesced)"),
    ] = 0.2,
    resync_seconds: Annotated[
        float, typer.Option(help="Full reconcile pass at least this often, changes or not")
    ] = 30.0,
    install_crds: Annotated[bool, typer.Option(help="Apply the CRDs at start")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the controller: policies -> DeviceClasses, operations, inventory clean-up."""
    from kubeacc.controller.controller import FIELD_MANAGER, Controller
    from kubeacc.crds.resources import install_crds as install

    _logging(verbose)
    client = _client(kubeconfig, FIELD_MANAGER)
    if install_crds:
        install(client)
    who = identity or f"{socket.gethostname()}-{os.getpid()}"
    Controller(
        client,
        identity=who,
        lease_namespace=lease_namespace,
        interval=interval,
        resync_seconds=resync_seconds,
    ).run(_stop_on_signals())


def lifecycle_agent_command(
    node_name: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name")],
    host_root: Annotated[Path, typer.Option(help="Root of the host's /sys, /dev, /proc")] = Path(
        "/"
    ),
    kubeconfig: Annotated[Path | None, typer.Option(help="kubeconfig; default: in-cluster")] = None,
    bitstream_dir: Annotated[
        Path, typer.Option(help="Node-local library of FPGA bitstreams")
    ] = Path("/var/lib/kubeacc/bitstreams"),
    interval: Annotated[
        float, typer.Option(help="Seconds between discoveries of the host (operations wake it)")
    ] = 1.0,
    resync_seconds: Annotated[
        float, typer.Option(help="Re-list and re-apply Accelerators and operations this often")
    ] = 60.0,
    simulate_kernel: Annotated[
        bool, typer.Option(help="Synthetic host: emulate the kernel's sysfs/ioctl effects")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the node side of the life cycle: Accelerator status and operations on this node."""
    from kubeacc.agent.lifecycle.agent import LifecycleAgent
    from kubeacc.agent.lifecycle.host import HostKernel, LinuxKernel

    _logging(verbose)
    kernel: HostKernel
    if simulate_kernel:
        from kubeacc.synthetic.kernel import SyntheticKernel

        kernel = SyntheticKernel(host_root)
    else:
        kernel = LinuxKernel(host_root)
    agent = LifecycleAgent(
        _client(kubeconfig, f"kubeacc-agent-{node_name}"),
        node_name=node_name,
        host_root=host_root,
        bitstream_dir=bitstream_dir,
        kernel=kernel,
        interval=interval,
        resync_seconds=resync_seconds,
    )
    agent.run(_stop_on_signals())


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
