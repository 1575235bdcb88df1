"""``kubeacc lifecycle-agent`` and ``kubeacc crds``.

``controller_command`` lives in :mod:`kubeacc.cli.controller` and is re-exported here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from kubeacc.cli.controller import controller_command
from kubeacc.cli.declare import option
from kubeacc.cli.hosts import (
    HostKind,
    HostKindOption,
    SimulateKernelOption,
    check_host_root,
    open_host,
)
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.options import (
    ContextOption,
    HostRootOption,
    KubeconfigOption,
    MetricsAddressOption,
)
from kubeacc.cli.probes import start_probes
from kubeacc.cli.signals import stop_on_signals
from kubeacc.discovery.nvml import NvmlMode

__all__ = ["controller_command", "crds_command", "lifecycle_agent_command"]


def lifecycle_agent_command(
    node_name: Annotated[str, option(envvar="NODE_NAME", help="This node's name")],
    host_root: HostRootOption = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    bitstream_dir: Annotated[Path, option(help="Node-local library of FPGA bitstreams")] = Path(
        "/var/lib/kubeacc/bitstreams"
    ),
    interval: Annotated[
        float,
        option(min=0.05, help="Seconds between discoveries of the host (operations wake it)"),
    ] = 1.0,
    resync_seconds: Annotated[
        float,
        option(
            min=1.0,
            help="Write an unchanged device's Accelerator status (its lastSeen) again this often",
        ),
    ] = 600.0,
    simulate_kernel: SimulateKernelOption = False,
    log_level: LogLevelOption = LogLevel.INFO,
    nvml: Annotated[
        NvmlMode, option(help="NVML for NVIDIA GPUs: auto, on (warn if unusable) or off")
    ] = NvmlMode.AUTO,
    metrics_address: MetricsAddressOption = None,
) -> None:
    """Run the node side of the life cycle: Accelerator status and operations on this node."""
    from kubeacc.clientconfig import make_client
    from kubeacc.gcfreeze import freeze_startup
    from kubeacc.lifecycle.agent import LifecycleAgent

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
    freeze_startup("lifecycle agent")
    try:
        agent.run(stop_on_signals(agent.wake))
    finally:
        if probes is not None:
            probes.stop()


def crds_command(
    write: Annotated[
        Path | None, option(help="Write one YAML file per CRD into this directory")
    ] = None,
) -> None:
    """Print (or write) the kubeacc.io CustomResourceDefinitions."""
    from kubeacc.crds.manifests import manifest_files
    from kubeacc.crds.manifests import write as write_files

    if write is not None:
        for path in write_files(write):
            print(path)
        return
    sys.stdout.write("---\n".join(manifest_files().values()))
