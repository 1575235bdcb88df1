"""``kubeacc agent``: the node agent (DRA driver ``kubeacc.io``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from kubeacc.cli.declare import option
from kubeacc.cli.errors import FAILURE, CommandExit, fail
from kubeacc.cli.hosts import (
    HostKind,
    HostKindOption,
    SimulateKernelOption,
    check_host_root,
    open_host,
)
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.multiarch import MultiarchError, expand
from kubeacc.cli.options import (
    ContextOption,
    DeviceRootOption,
    HostRootOption,
    Inventory,
    KubeconfigOption,
    MetricsAddressOption,
    UnitsTableOption,
    use_units_table,
)
from kubeacc.discovery.nvml import NvmlMode
from kubeacc.model import DeviceType
from kubeacc.node.userspace.provider import UserSpaceMode

if TYPE_CHECKING:
    from kubeacc.deviceplugin.config import DevicePluginConfig
    from kubeacc.deviceplugin.shared import DecisionLookup
    from kubeacc.discovery.backends.adminconfig import DiscoveryConfig


def agent_command(
    node_name: Annotated[str, option(envvar="NODE_NAME", help="This node's name.")],
    host_root: HostRootOption = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    device_root: DeviceRootOption = Path("/"),
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    kubelet_root: Annotated[Path, option(help="The kubelet's --root-dir.")] = Path(
        "/var/lib/kubelet"
    ),
    cdi_dir: Annotated[Path, option(help="Where CDI specs are written.")] = Path("/var/run/cdi"),
    state_dir: Annotated[Path, option(help="Checkpoint directory.")] = Path("/var/lib/kubeacc"),
    apply_classes: Annotated[
        bool, option("--apply-classes", help="Create/update the driver's DeviceClasses.")
    ] = False,
    rediscover_interval: Annotated[
        float, option(min=0.05, help="Seconds between re-discoveries (hot-plug, health).")
    ] = 5.0,
    kubelet_plugin: Annotated[
        bool,
        option(help="Serve the kubelet DRA plugin (off: only publish ResourceSlices)."),
    ] = True,
    device_plugin_types: Annotated[
        list[DeviceType] | None,
        option(
            "--device-plugin-type",
            help="Serve this type through the kubelet device plugin API instead of DRA "
            "(repeatable; one mode per type).",
        ),
    ] = None,
    device_plugin_dir: Annotated[
        Path | None,
        option(help="The kubelet's device-plugin dir (default: <kubelet-root>/device-plugins)."),
    ] = None,
    bitstream_dir: Annotated[
        Path | None,
        option(help="Bitstream library: claims whose FpgaConfig names one get it loaded."),
    ] = None,
    fpga_binding_conditions: Annotated[
        bool,
        option(
            help="With --bitstream-dir: load a claim's bitstream before its pod is bound "
            "(DRA binding conditions, where the API server keeps them); off: at prepare.",
        ),
    ] = True,
    simulate_kernel: SimulateKernelOption = False,
    compact_after: Annotated[
        int,
        option(
            min=1, help="Fold the DRA checkpoint journal into a new snapshot after this many calls."
        ),
    ] = 1000,
    log_level: LogLevelOption = LogLevel.INFO,
    nvml: Annotated[
        NvmlMode, option(help="NVML for NVIDIA GPUs: auto, on (warn if unusable) or off.")
    ] = NvmlMode.AUTO,
    nvml_library: Annotated[
        Path | None,
        option(
            help="NVML library file (the host driver's libnvidia-ml.so.1, mounted); {multiarch} "
            "stands for this machine's multiarch directory (x86_64-linux-gnu, aarch64-linux-gnu)."
        ),
    ] = None,
    driver_tools_dir: Annotated[
        Path | None,
        option(
            help="The host NVIDIA driver's tools (nvidia-smi, nvidia-cuda-mps-control), mounted; "
            "looked up before <host-root>/usr/bin and PATH."
        ),
    ] = None,
    driver_library_dir: Annotated[
        Path | None,
        option(
            help="The host NVIDIA driver's libraries, mounted: the driver tools run with its "
            "libnvidia-*/libcuda* (linked into <state-dir>/driver-libs) on LD_LIBRARY_PATH; "
            "{multiarch} as in --nvml-library."
        ),
    ] = None,
    discovery_config: Annotated[
        Path | None, option(help="Admin-defined devices (DiscoveryConfig YAML).")
    ] = None,
    device_plugin_config: Annotated[
        Path | None,
        option(help="DevicePluginConfig YAML: its types are served through the device plugin."),
    ] = None,
    node_labels: Annotated[
        bool,
        option(help="Label the Node with what was found (kubeacc.io/<type>.count, ...)."),
    ] = True,
    metrics_address: MetricsAddressOption = None,
    telemetry_interval: Annotated[
        float,
        option(
            min=0,
            help="Seconds between device telemetry samples on /metrics (utilisation, memory, "
            "temperature, power, errors per device and holder); 0: off.",
        ),
    ] = 10.0,
    health_taints: Annotated[
        bool,
        option(
            help="Taint devices in the ResourceSlice when the telemetry sees a fault (NoExecute: "
            "lost or corrupt, its pods evicted; NoSchedule; None: degraded, still given out); "
            "needs --metrics-address and a telemetry interval.",
        ),
    ] = False,
    health_taint_hold: Annotated[
        float,
        option(
            min=1,
            help="Seconds a health taint stays at least after the device's last fault "
            "(doubled while the device flaps).",
        ),
    ] = 300.0,
    device_status: Annotated[
        bool,
        option(
            help="Write the claims' status.devices at prepare (Ready, PCI address, GPU or MIG "
            "UUID, NIC network data) and remove them at unprepare.",
        ),
    ] = True,
    device_metadata: Annotated[
        bool,
        option(
            help="Give containers their devices' metadata files under "
            "/var/run/kubernetes.io/dra-device-attributes (KEP-5304).",
        ),
    ] = True,
    units_table: UnitsTableOption = None,
    dra_publish: Annotated[
        list[str] | None,
        option(
            "--dra-publish",
            metavar="KIND",
            help="Publish this kind's devices in the ResourceSlices: gpu, fpga, nic, xpu, "
            "accelerator, or vf (the NICs' SR-IOV virtual functions; needs nic) (repeatable). "
            "Default: every type, no VFs: kube-scheduler reads every device a node publishes "
            "for every pod it places (docs/dra.md, 'What is published').",
        ),
    ] = None,
    memory_shared: Annotated[
        list[str] | None,
        option(
            "--memory-shared",
            metavar="SELECTOR",
            help="Publish the devices this selects as memory-shared (DRA consumable capacity "
            "kubeacc.io/memory and kubeacc.io/cores): all, type=TYPE, model=GLOB, pci=BUS-ID "
            "or name=DEVICE (repeatable; GPUs and KunLun XPUs, an FPGA only when named; GPUs "
            "in MIG mode never). AcceleratorPolicies with mode MemoryShared or MPS add to it.",
        ),
    ] = None,
    sharelimit_library: Annotated[
        Path | None,
        option(
            help="The share-limit library preloaded into the containers of GPU memory shares "
            "(default: the image's /opt/kubeacc/native/libkubeacc-sharelimit.so when present); "
            "copied to "
            "<state-dir>/native, the host path the CDI specs mount. Without it shares are "
            "advisory.",
        ),
    ] = None,
    driver_user_space: Annotated[
        UserSpaceMode,
        option(
            help="NVIDIA driver user space (libcuda, NVML, nvidia-smi, firmware) in the "
            "containers of NVIDIA GPUs: cdi (kube-acc's CDI specs carry it, found under "
            "--driver-root) or toolkit (left to an installed NVIDIA container toolkit).",
        ),
    ] = UserSpaceMode.CDI,
    driver_root: Annotated[
        str,
        option(
            help="The NVIDIA driver root, a host path read under --host-root: / for a driver "
            "installed on the host, /run/nvidia/driver for a driver container.",
        ),
    ] = "/",
    runtime_driver_root: Annotated[
        Path | None,
        option(
            help="The driver root as the container runtime sees it (the CDI specs' hostPath; "
            "default: <host-root>/<driver-root>, right when the agent runs on the host).",
        ),
    ] = None,
    cdi_hook: Annotated[
        Path | None,
        option(
            help="kube-acc's CDI hook program (default: the image's "
            "/opt/kubeacc/native/kubeacc-cdi-hook), copied to <state-dir>/native.",
        ),
    ] = None,
    inventory: Annotated[
        Inventory,
        option(
            help="Where the node's devices come from: host (discovered under --host-root) or "
            "cyborg (OpenStack Cyborg's devices for this node; claims on them are bound "
            "through Cyborg and Placement, docs/cyborg.md).",
        ),
    ] = Inventory.HOST,
    cyborg_credentials: Annotated[
        Path | None,
        option(
            help="With --inventory cyborg: the credentials file (a mounted Secret; YAML: "
            "cyborgUrl, placementUrl, token or projectId/userId/roles, eventsToken).",
        ),
    ] = None,
    cyborg_events_address: Annotated[
        str | None,
        option(
            help="With --inventory cyborg: HOST:PORT to take Cyborg's bind events on (its "
            "[nova] endpoint); unset: binds are learnt by asking Cyborg.",
        ),
    ] = None,
    cyborg_bind_timeout: Annotated[
        float, option(min=1, help="Seconds a claim's Cyborg ARQs may take to be bound.")
    ] = 60.0,
    cyborg_compute_host: Annotated[
        str | None,
        option(
            help="With --inventory cyborg: this node's compute host in Cyborg and Placement "
            "(default: the node's name).",
        ),
    ] = None,
) -> None:
    """Run the node agent: discovery, ResourceSlices and the kubelet DRA plugin."""
    import faulthandler

    from kubeacc.contracts.arenas import limit_arenas

    limit_arenas()  # before any thread starts: see kubeacc/contracts/arenas.py

    from kubeacc.agent.compose import compose_agent
    from kubeacc.agent.dra.checkpoint import StateError
    from kubeacc.agent.dra.publishing import Publishing
    from kubeacc.agent.dra.sharing.limits import parse_selectors
    from kubeacc.agent.options import (
        AgentOptions,
        ApiOptions,
        CyborgOptions,
        NodePaths,
        ObserveOptions,
        PrepareOptions,
        PublishOptions,
    )
    from kubeacc.cli.signals import stop_on_signals
    from kubeacc.gcfreeze import freeze_startup
    from kubeacc.metrics.http import MetricsAddressError, parse_address

    try:
        if metrics_address is not None:
            parse_address(metrics_address)
        discovery = _discovery_config(discovery_config)
        shared = parse_selectors(memory_shared or [])
        publishing = Publishing.parse(dra_publish or [])
        dp_config = _device_plugin_config(device_plugin_types or [], device_plugin_config)
    except ValueError as err:  # the config errors and MetricsAddressError
        fail(str(err))
    use_units_table(units_table)
    cyborg = None
    if inventory is Inventory.CYBORG:
        if cyborg_credentials is None:
            fail("--inventory cyborg needs --cyborg-credentials")
        cyborg = CyborgOptions(
            credentials=cyborg_credentials,
            events_address=cyborg_events_address,
            bind_timeout=cyborg_bind_timeout,
            compute_host=cyborg_compute_host or "",
        )
    elif any(
        o is not None for o in (cyborg_credentials, cyborg_events_address, cyborg_compute_host)
    ):
        fail(
            "--cyborg-credentials, --cyborg-events-address and --cyborg-compute-host need "
            "--inventory cyborg"
        )
    try:
        nvml_library = expand(nvml_library)
        driver_library_dir = expand(driver_library_dir)
    except MultiarchError as err:
        fail(str(err))
    if nvml_library is not None:
        from kubeacc.discovery.nvml import use_nvml_library

        use_nvml_library(nvml_library)

    faulthandler.enable()  # a crash in a C extension leaves the Python stacks in the log

    check_host_root(host_root)
    setup_logging(log_level)
    driver = None
    if driver_tools_dir is not None or driver_library_dir is not None:
        from kubeacc.host.tools import use_driver_tools

        try:
            driver = use_driver_tools(
                driver_tools_dir, driver_library_dir, state_dir / "driver-libs"
            )
        except (ValueError, OSError) as err:
            fail(str(err))
    host = open_host(host_root, host_kind, simulate_kernel=simulate_kernel, driver=driver)
    try:
        agent = compose_agent(
            host,
            AgentOptions(
                node=NodePaths(
                    node_name=node_name,
                    device_root=device_root,
                    kubelet_root=kubelet_root,
                    cdi_dir=cdi_dir,
                    state_dir=state_dir,
                    kubelet_plugin=kubelet_plugin,
                ),
                api=ApiOptions(kubeconfig=kubeconfig, context=context),
                publish=PublishOptions(
                    apply_classes=apply_classes,
                    rediscover_interval=rediscover_interval,
                    device_plugin_types=frozenset(dp_config.types if dp_config else ()),
                    publishing=publishing,
                    node_labels=node_labels,
                    nvml=nvml.value,
                    discovery_config=discovery,
                    memory_shared=shared,
                ),
                prepare=PrepareOptions(
                    compact_after=compact_after,
                    device_status=device_status,
                    device_metadata=device_metadata,
                    bitstream_dir=bitstream_dir,
                    fpga_binding_conditions=fpga_binding_conditions,
                    sharelimit_library=sharelimit_library,
                    driver_user_space=driver_user_space,
                    driver_root=driver_root,
                    runtime_driver_root=runtime_driver_root,
                    cdi_hook=cdi_hook,
                ),
                observe=ObserveOptions(
                    metrics_address=metrics_address,
                    telemetry_interval=telemetry_interval,
                    health_taints=health_taints,
                    health_taint_hold=health_taint_hold,
                ),
                cyborg=cyborg,
            ),
        )
    except StateError as exc:
        fail(str(exc), FAILURE)
    if dp_config is not None:
        from kubeacc.deviceplugin.manager import DevicePluginManager

        agent.add_plugin(
            DevicePluginManager(
                device_plugin_dir or kubelet_root / "device-plugins",
                dp_config,
                cdi_dir,
                device_root,
                agent.metrics,
                _decisions(dp_config, agent.client, node_name, kubelet_root),
                agent.limiter,
                agent.user_space,
            )
        )

    stop_on_signals(agent.request_stop)
    #: Cyborg's errors at start, caught only where it is the inventory (its modules stay out of
    #: a host agent's start: tests/cli/test_entry_imports.py).
    cyborg_errors: tuple[type[Exception], ...] = ()
    if inventory is Inventory.CYBORG:
        from kubeacc.node.cyborg.client import CyborgError

        cyborg_errors = (CyborgError,)
    try:
        agent.start()
    except StateError as exc:
        fail(str(exc), FAILURE)
    except cyborg_errors as exc:  # no inventory yet to keep: the old slices stay on the server
        fail(f"Cyborg's devices of this node not read at start: {exc}", FAILURE)
    except MetricsAddressError as err:
        fail(str(err))
    logging.getLogger("kubeacc.agent").info("agent ready on node %s", node_name)
    freeze_startup("agent")  # after registration: the kubelet need not wait for it
    agent.wait()
    agent.stop()


def _decisions(
    config: DevicePluginConfig, client: Any, node: str, kubelet_root: Path
) -> DecisionLookup | None:
    """The extender's decisions for shared GPUs: this node's pods, and what the kubelet
    already allocated (its pod-resources API)."""
    if not any(t.shared for t in config.types.values()):
        return None
    from lightkube import ALL_NS
    from lightkube.resources.core_v1 import Pod

    from kubeacc.agent.podresources import SOCKET, PodResourcesClient
    from kubeacc.crds.resources import as_dict
    from kubeacc.deviceplugin.shared import DecisionLookup

    def pods() -> list[dict[str, Any]]:
        found = client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": node})
        return [as_dict(p) for p in found]

    resources = PodResourcesClient(kubelet_root / SOCKET)

    def allocated() -> set[tuple[str, str, str]]:
        return {
            (f"{p.namespace}/{p.name}", c.name, d.resource_name)
            for p in resources.list()
            for c in p.containers
            for d in c.devices
            if d.device_ids
        }

    return DecisionLookup(node, pods, allocated)


def _discovery_config(path: Path | None) -> DiscoveryConfig | None:
    from kubeacc.discovery import load_config

    return load_config(path) if path is not None else None


def _device_plugin_config(types: list[DeviceType], path: Path | None) -> DevicePluginConfig | None:
    """The file's types plus ``--device-plugin-type`` ones (default settings); None: no types."""
    from kubeacc.deviceplugin.config import DevicePluginConfig, TypeConfig, load_config

    config = load_config(path) if path is not None else DevicePluginConfig()
    for t in types:
        config.types.setdefault(t, TypeConfig())
    return config if config.types else None


def install_classes_command(
    kubeconfig: KubeconfigOption = None, context: ContextOption = None
) -> None:
    """Create or update the DeviceClasses of the kubeacc.io DRA driver."""
    from kubeacc.agent.dra.classes import apply_device_classes
    from kubeacc.clientconfig import make_client

    for name in apply_device_classes(make_client(kubeconfig, context=context)):
        print(f"deviceclass {name} applied")


def cleanup_command(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    settle: Annotated[
        float, option(help="Seconds between passes (agents shutting down may write).")
    ] = 5.0,
) -> None:
    """Remove what node agents leave behind: kubeacc.io ResourceSlices and their Node labels."""
    from kubeacc.agent.cleanup import clean
    from kubeacc.clientconfig import make_client

    removed = clean(make_client(kubeconfig, context=context), settle=settle)
    nodes = removed.labelled_nodes
    print(f"removed {removed.slices} ResourceSlices, kubeacc.io labels of {nodes} Nodes")


def uninstall_check_command(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Exit 1 while pods use claims of kube-acc's DRA driver (the chart's pre-delete hook): once
    the agents are gone the kubelet could not unprepare them. Lists those claims and pods."""
    from lightkube.resources.resource_v1 import ResourceClaim

    from kubeacc.agent.inuse import claims_in_use
    from kubeacc.clientconfig import make_client
    from kubeacc.crds.resources import as_dict

    client = make_client(kubeconfig, context=context)
    used = claims_in_use([as_dict(c) for c in client.list(ResourceClaim, namespace="*")])
    if not used:
        print("no pod uses a claim of kubeacc.io: safe to uninstall")
        return
    print(
        f"{len(used)} claim(s) of kubeacc.io are in use; delete these pods first (the kubelet "
        "cannot unprepare their devices once the agents are gone), then uninstall again:"
    )
    for u in used:
        print(f"  {u.line()}")
    raise CommandExit(1)
