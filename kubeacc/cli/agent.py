"""``kubeacc agent``: the node agent (DRA driver ``kubeacc.io``)."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from kubeacc.model import DeviceType


def agent_command(
    node_name: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name.")],
    host_root: Annotated[Path, typer.Option(help="Root of the host's /sys, /dev, /proc.")] = Path(
        "/"
    ),
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig (default: in-cluster service account).")
    ] = None,
    kubelet_root: Annotated[Path, typer.Option(help="The kubelet's --root-dir.")] = Path(
        "/var/lib/kubelet"
    ),
    cdi_dir: Annotated[Path, typer.Option(help="Where CDI specs are written.")] = Path(
        "/var/run/cdi"
    ),
    state_dir: Annotated[Path, typer.Option(help="Checkpoint directory.")] = Path(
        "/var/lib/kubeacc"
    ),
    apply_classes: Annotated[
        bool, typer.Option("--apply-classes", help="Create/update the driver's DeviceClasses.")
    ] = False,
    rediscover_interval: Annotated[
        float, typer.Option(help="Seconds between re-discoveries (hot-plug, health).")
    ] = 5.0,
    kubelet_plugin: Annotated[
        bool,
        typer.Option(help="Serve the kubelet DRA plugin (off: only publish ResourceSlices)."),
    ] = True,
    device_plugin_types: Annotated[
        list[DeviceType] | None,
        typer.Option(
            "--device-plugin-type",
            help="Serve this type through the kubelet device plugin API instead of DRA "
            "(repeatable; one mode per type).",
        ),
    ] = None,
    device_plugin_dir: Annotated[
        Path | None,
        typer.Option(
            help="The kubelet's device-plugin dir (default: <kubelet-root>/device-plugins)."
        ),
    ] = None,
    bitstream_dir: Annotated[
        Path | None,
        typer.Option(help="Bitstream library: claims whose FpgaConfig names one get it loaded."),
    ] = None,
    simulate_kernel: Annotated[
        bool, typer.Option(help="Synthetic host: emulate the kernel's FPGA programming effects.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
) -> None:
    """Run the node agent: discovery, ResourceSlices and the kubelet DRA plugin."""
    import faulthandler

    from kubeacc.agent.runner import Agent, AgentOptions

    faulthandler.enable()  # a crash in a C extension leaves the Python stacks in the log

    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    agent = Agent(
        AgentOptions(
            node_name=node_name,
            host_root=host_root,
            kubeconfig=kubeconfig,
            kubelet_root=kubelet_root,
            cdi_dir=cdi_dir,
            state_dir=state_dir,
            apply_classes=apply_classes,
            rediscover_interval=rediscover_interval,
            kubelet_plugin=kubelet_plugin,
            device_plugin_types=frozenset(device_plugin_types or ()),
            bitstream_dir=bitstream_dir,
            simulate_kernel=simulate_kernel,
        )
    )
    if device_plugin_types:
        from kubeacc.agent.deviceplugin.config import DevicePluginConfig
        from kubeacc.agent.deviceplugin.manager import DevicePluginManager

        agent.add_plugin(
            DevicePluginManager(
                device_plugin_dir or kubelet_root / "device-plugins",
                DevicePluginConfig.for_types(list(device_plugin_types)),
                cdi_dir,
                host_root,
            )
        )

    def _term(signum: int, frame: object) -> None:
        agent.request_stop()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    agent.start()
    logging.getLogger("kubeacc.agent").info("agent ready on node %s", node_name)
    agent.wait()
    agent.stop()


def install_classes_command(
    kubeconfig: Annotated[Path | None, typer.Option(help="Kubeconfig.")] = None,
) -> None:
    """Create or update the DeviceClasses of the kubeacc.io DRA driver."""
    from kubeacc.agent.dra.classes import apply_device_classes
    from kubeacc.agent.runner import make_client

    for name in apply_device_classes(make_client(kubeconfig)):
        typer.echo(f"deviceclass {name} applied")
