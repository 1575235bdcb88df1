"""The node agent's settings, grouped by the collaborator that reads them.

``kubeacc agent``'s command line fills these (:mod:`kubeacc.cli.agent`);
:func:`kubeacc.agent.compose.compose_agent` hands each group to what needs it: ``api`` to the
clients, ``prepare`` to the DRA driver and what it prepares with, ``node``, ``publish`` and
``observe`` to the agent's loop. The node itself (its :class:`~kubeacc.host.Host`) is not a
setting: the command chooses it and passes it in.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from kubeacc.agent.dra.publishing import Publishing
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.model import DeviceType
from kubeacc.node.cdi import DEFAULT_CDI_DIR
from kubeacc.node.userspace.provider import UserSpaceMode

if TYPE_CHECKING:
    from kubeacc.agent.dra.sharing.limits import ShareSelector
    from kubeacc.discovery.backends.adminconfig import DiscoveryConfig


class NodePaths(msgspec.Struct, frozen=True, kw_only=True):
    """This node and where the agent meets the kubelet and the container runtime."""

    node_name: str
    #: Where the device nodes are on the host (CDI ``hostPath``): ``/`` on a real node, a
    #: directory of real device nodes on a test node whose host root is synthetic.
    device_root: Path = Path("/")
    kubelet_root: Path = Path("/var/lib/kubelet")
    cdi_dir: Path = DEFAULT_CDI_DIR
    state_dir: Path = Path("/var/lib/kubeacc")
    #: Serve the kubelet (DRA socket + registration). Off for nodes that have no kubelet.
    kubelet_plugin: bool = True

    @property
    def dra_socket(self) -> Path:
        return self.kubelet_root / "plugins" / DRIVER_NAME / "dra.sock"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"


class ApiOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How the agent's clients reach the API server."""

    kubeconfig: Path | None = None
    #: The kubeconfig context (``--context``; default: its current one).
    context: str | None = None


class PublishOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What discovery looks for and what the agent publishes of it (slices, labels, classes)."""

    apply_classes: bool = False
    rediscover_interval: float = 5.0
    #: Full re-check of the server's slices (someone deleted them) every this many seconds.
    resync_interval: float = 60.0
    #: Types served through the kubelet device plugin API instead of DRA (one mode per type).
    device_plugin_types: frozenset[DeviceType] = frozenset()
    #: What DRA publishes (``--dra-publish``): device types, and whether NICs' VFs too.
    publishing: Publishing = msgspec.field(default_factory=Publishing)
    #: Label the Node with what discovery found (``kubeacc.io/<type>.count`` and so on).
    node_labels: bool = True
    #: NVML: ``auto`` (when it answers), ``on`` (warn when it can't be used) or ``off``.
    nvml: str = "auto"
    #: Admin-defined devices (``--discovery-config``).
    discovery_config: DiscoveryConfig | None = None
    #: GPUs published as memory-shared (``--memory-shared``; kubeacc.agent.dra.sharing).
    memory_shared: tuple[ShareSelector, ...] = ()


class PrepareOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How the DRA driver prepares claims: its journal, FPGA programming, shares, user space."""

    #: Fold the DRA checkpoint journal into a new snapshot after this many calls.
    compact_after: int = 1000
    #: Write claims' status.devices at prepare, remove them at unprepare (kubeacc.agent.dra.
    #: devicestatus; DRAResourceClaimDeviceStatus).
    device_status: bool = True
    #: Device metadata files in the containers (kubeacc.agent.dra.metadata; KEP-5304).
    device_metadata: bool = True
    #: Node-local bitstream library: claims with an FpgaConfig bitstream get it programmed.
    bitstream_dir: Path | None = None
    #: With a bitstream library: load a claim's bitstream before its pod is bound (binding
    #: conditions, kubeacc.agent.dra.fpga.binding) where the cluster keeps them; off: at prepare.
    fpga_binding_conditions: bool = True
    #: The share-limit library to preload into memory shares (None: the image's, if any;
    #: copied to ``<state-dir>/native``; kubeacc.node.sharelimit).
    sharelimit_library: Path | None = None
    #: The NVIDIA driver's user space in NVIDIA GPU containers (kubeacc.node.userspace):
    #: ``cdi`` (found under ``driver_root``) or ``toolkit`` (left to the NVIDIA toolkit).
    driver_user_space: UserSpaceMode = UserSpaceMode.CDI
    #: The driver root, a host path (``/``; ``/run/nvidia/driver`` for a driver container).
    driver_root: str = "/"
    #: The driver root as the container runtime sees it (None: the agent's own path of it).
    runtime_driver_root: Path | None = None
    #: The CDI hook program to copy to ``<state-dir>/native`` (None: the image's).
    cdi_hook: Path | None = None


class ObserveOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent watches and reports: users, metrics, telemetry, health taints."""

    #: Keep the node's Accelerators' users (status.allocatedTo) and honour their cordons.
    sync_accelerators: bool = True
    #: Seconds between reads of the kubelet's pod-resources API (device-plugin users).
    users_poll_interval: float = 2.0
    #: ``HOST:PORT`` of /metrics, /healthz, /readyz; None: not served.
    metrics_address: str | None = None
    #: Seconds between device telemetry samples on /metrics (kubeacc.agent.telemetry);
    #: 0: no device telemetry. Sampled only while metrics are served.
    telemetry_interval: float = 10.0
    #: Faults the telemetry sees become ResourceSlice taints (kubeacc.agent.healthtaints);
    #: needs the telemetry. Off: faults only go to the Node's Events and the remediation.
    health_taints: bool = False
    #: Seconds a health taint stays at least after the device's last fault.
    health_taint_hold: float = 300.0


class CyborgOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The node's devices from OpenStack Cyborg (``--inventory cyborg``; docs/cyborg.md)."""

    #: The credentials file (a mounted Secret): URLs of Cyborg and Placement, token or identity.
    credentials: Path
    #: ``HOST:PORT`` where Cyborg's ``[nova]`` endpoint sends its bind events (None: not
    #: served; the agent then learns each bind by asking Cyborg).
    events_address: str | None = None
    #: Seconds a claim's ARQs may take to become Bound.
    bind_timeout: float = 60.0
    #: The node's compute host in Cyborg and Placement ("": the node's name; a hypervisor's
    #: name is often the host's full name where the Node's is its short one).
    compute_host: str = ""


class AgentOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Every group; only :func:`~kubeacc.agent.compose.compose_agent` reads it whole."""

    node: NodePaths
    api: ApiOptions = ApiOptions()
    publish: PublishOptions = PublishOptions()
    prepare: PrepareOptions = PrepareOptions()
    observe: ObserveOptions = ObserveOptions()
    #: None: the devices are the host's own (discovery); set: Cyborg's for this node.
    cyborg: CyborgOptions | None = None


def options_from(**settings: Any) -> AgentOptions:
    """Options from settings by name (``node_name=...``, ``state_dir=...``), each put in its
    group: for callers that hold a few settings flat, such as the tests and the benchmarks."""
    groups: dict[str, dict[str, Any]] = {name: {} for name in _GROUPS}
    for key, value in settings.items():
        group = next((g for g, cls in _GROUPS.items() if key in _FIELDS[cls]), None)
        if group is None:
            raise TypeError(f"no agent setting {key!r}")
        groups[group][key] = value
    made: dict[str, Any] = {g: _GROUPS[g](**kw) for g, kw in groups.items() if kw}
    return AgentOptions(**made)


_GROUPS: dict[str, type[msgspec.Struct]] = {
    "node": NodePaths,
    "api": ApiOptions,
    "publish": PublishOptions,
    "prepare": PrepareOptions,
    "observe": ObserveOptions,
    "cyborg": CyborgOptions,
}
_FIELDS: dict[type, set[str]] = {cls: set(cls.__struct_fields__) for cls in _GROUPS.values()}
