"""``kubeacc lifecycle-agent`` and ``kubeacc crds``.

``controller_command`` lives in :mod:`kubeacc.cli.controller` and is re-exported here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from kubeacc.cli.controller import controller_command
from kubeacc.cli.declare import option
from kubeacc.cli.errors import FAILURE, fail
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
    Inventory,
    KubeconfigOption,
    MetricsAddressOption,
)
from kubeacc.cli.probes import start_probes
from kubeacc.cli.signals import stop_on_signals
from kubeacc.discovery.nvml import NvmlMode

if TYPE_CHECKING:
    from kubeacc.lifecycle.cyborgops import CyborgOperations

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
    inventory: Annotated[
        Inventory,
        option(
            help="Where the node's devices come from: host (discovered under --host-root) or "
            "cyborg (OpenStack Cyborg's deployables for this node; FPGA programming through "
            "Cyborg and Glance, docs/cyborg.md).",
        ),
    ] = Inventory.HOST,
    cyborg_credentials: Annotated[
        Path | None,
        option(
            help="With --inventory cyborg: the credentials file (the node agent's Secret; "
            "glanceUrl for programming).",
        ),
    ] = None,
    cyborg_compute_host: Annotated[
        str | None,
        option(help="With --inventory cyborg: this node's compute host in Cyborg and Placement."),
    ] = None,
) -> None:
    """Run the node side of the life cycle: Accelerator status and operations on this node."""
    from kubeacc.clientconfig import make_client
    from kubeacc.gcfreeze import freeze_startup
    from kubeacc.lifecycle.agent import LifecycleAgent

    check_host_root(host_root)
    setup_logging(log_level)
    cyborg = None
    if inventory is Inventory.CYBORG:
        if cyborg_credentials is None:
            fail("--inventory cyborg needs --cyborg-credentials")
        cyborg = cyborg_operations(
            cyborg_credentials, cyborg_compute_host or node_name, bitstream_dir
        )
    elif cyborg_credentials is not None or cyborg_compute_host is not None:
        fail("--cyborg-credentials and --cyborg-compute-host need --inventory cyborg")
    host = open_host(host_root, host_kind, simulate_kernel=simulate_kernel)
    agent = LifecycleAgent(
        make_client(kubeconfig, f"kubeacc-agent-{node_name}", context=context),
        node_name=node_name,
        host=host,
        bitstream_dir=bitstream_dir,
        interval=interval,
        resync_seconds=resync_seconds,
        nvml=nvml.value,
        cyborg=cyborg,
    )
    probes = start_probes(metrics_address, agent.metrics.registry, ready=agent.not_ready)
    freeze_startup("lifecycle agent")
    try:
        agent.run(stop_on_signals(agent.wake))
    finally:
        if probes is not None:
            probes.stop()


def cyborg_operations(
    credentials: Path, compute_host: str, bitstream_dir: Path
) -> CyborgOperations:
    """The life-cycle agent's Cyborg side (kubeacc.lifecycle.cyborgops); exits on a bad
    credentials file."""
    from kubeacc.lifecycle.cyborgops import CyborgOperations
    from kubeacc.node.cyborg.client import CyborgClient, read_credentials
    from kubeacc.node.cyborg.glance import GlanceImages
    from kubeacc.node.cyborg.inventory import CyborgInventory
    from kubeacc.node.operations.bitstreams import BitstreamLibrary

    try:
        creds = read_credentials(credentials)
    except ValueError as exc:
        fail(str(exc), FAILURE)
    client = CyborgClient(creds)
    # every unit is an Accelerator: no claim records are read (Placement says who holds one)
    inventory = CyborgInventory(client, compute_host, None, every_unit=True)
    return CyborgOperations(
        client, inventory, BitstreamLibrary(bitstream_dir), lambda: GlanceImages(creds)
    )


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
