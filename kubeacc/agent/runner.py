"""The node agent: discovery loop, ResourceSlice publishing, kubelet plugins.

Start-up order: discover once, reconcile the DRA checkpoint with the CDI directory, serve the
DRA socket, then announce it in the kubelet's plugin registry. A background loop re-discovers
every ``rediscover_interval`` seconds and, only when something changed, updates the health
stream and the node's ResourceSlices (plus a full re-check of the server every ``resync``
seconds). Publishing failures (API server away) are logged and retried with exponential backoff;
the kubelet is served all the while.

Other kubelet plugins (the device-plugin mode) hook in through :class:`NodePlugin`: give them
to :meth:`Agent.add_plugin` and they are started, fed every new inventory and stopped with the
agent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from kubeacc.agent.dra import DRIVER_NAME
from kubeacc.agent.dra.cdi import DEFAULT_CDI_DIR
from kubeacc.agent.dra.claims import ClaimSource, WatchingClaimSource
from kubeacc.agent.dra.classes import apply_device_classes
from kubeacc.agent.dra.devices import DeviceInfo, device_index, slice_devices
from kubeacc.agent.dra.driver import Driver
from kubeacc.agent.dra.health import HealthBoard
from kubeacc.agent.dra.plugin import SUPPORTED_SERVICES, PluginServer
from kubeacc.agent.dra.slices import SlicePublisher
from kubeacc.agent.registration import DRA_PLUGIN_TYPE, RegistrationServer
from kubeacc.discovery import discover
from kubeacc.model import DeviceType, Inventory

log = logging.getLogger(__name__)


def dra_part(inv: Inventory, device_plugin_types: frozenset[DeviceType]) -> Inventory:
    """The devices DRA serves: all but the types given to the device plugin."""
    if not device_plugin_types:
        return inv
    return inv.model_copy(
        update={"devices": [d for d in inv.devices if d.type not in device_plugin_types]}
    )


def prime_decoders() -> None:
    """Build the API response decoders of the agent's threads before any of them runs.

    Two of the agent's threads (claim watch, publishing loop) decoding their first responses at
    the same moment crashed the agent with a segfault in msgspec about once in twenty starts;
    see :func:`kubeacc.apiclient.prime_decoders`.
    """
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

    from kubeacc.apiclient import prime_decoders as prime

    prime((ResourceClaim, ResourceSlice, DeviceClass, Node))


class NodePlugin(Protocol):
    """Another kubelet-facing plugin run by the agent (e.g. the device plugin)."""

    def start(self, inventory: Inventory) -> None: ...

    def update(self, inventory: Inventory) -> None: ...

    def stop(self) -> None: ...


@dataclass
class AgentOptions:
    node_name: str
    host_root: Path = Path("/")
    kubeconfig: Path | None = None
    kubelet_root: Path = Path("/var/lib/kubelet")
    cdi_dir: Path = DEFAULT_CDI_DIR
    state_dir: Path = Path("/var/lib/kubeacc")
    apply_classes: bool = False
    rediscover_interval: float = 5.0
    #: Full re-check of the server's slices (someone deleted them) every this many seconds.
    resync_interval: float = 60.0
    #: Serve the kubelet (DRA socket + registration). Off for nodes that have no kubelet.
    kubelet_plugin: bool = True
    #: Types served through the kubelet device plugin API instead of DRA (one mode per type).
    device_plugin_types: frozenset[DeviceType] = frozenset()
    #: Node-local bitstream library: claims with an FpgaConfig bitstream get it programmed.
    bitstream_dir: Path | None = None
    #: Synthetic host: emulate the kernel's sysfs/ioctl effects of programming an FPGA.
    simulate_kernel: bool = False

    @property
    def dra_socket(self) -> Path:
        return self.kubelet_root / "plugins" / DRIVER_NAME / "dra.sock"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_root / "plugins_registry"


def make_client(kubeconfig: Path | None) -> Client:
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account()
    return Client(config)


class Agent:
    def __init__(
        self,
        options: AgentOptions,
        client: Client | None = None,
        claims: ClaimSource | None = None,
    ) -> None:
        self.opts = options
        self.client = client or make_client(options.kubeconfig)
        self.publisher = SlicePublisher(self.client, options.node_name)
        self.board = HealthBoard(options.node_name)
        self._watch: WatchingClaimSource | None = None
        if claims is None and options.kubelet_plugin:
            claims = self._watch = WatchingClaimSource(self.client, options.node_name)
        self._index: dict[str, DeviceInfo] = {}
        self.driver = Driver(
            options.node_name,
            claims or WatchingClaimSource(self.client, options.node_name),
            lambda: self._index,
            cdi_dir=options.cdi_dir,
            state_dir=options.state_dir,
            host_root=options.host_root,
            fpga=self._fpga_programmer(),
        )
        self.plugin: PluginServer | None = None
        self.registration: RegistrationServer | None = None
        self._plugins: list[NodePlugin] = []
        self._stop = threading.Event()
        #: Wakes the loop early (stop, or the kubelet registered us).
        self._wake = threading.Event()
        #: Until then, every loop pass re-reads the server's slices (see _on_registered).
        self._force_until = 0.0
        self._thread: threading.Thread | None = None
        self.inventory = Inventory()
        self.dra_inventory = Inventory()
        self.published = threading.Event()

    def _fpga_programmer(self) -> Callable[[str, str, str], str] | None:
        if self.opts.bitstream_dir is None:
            return None
        from kubeacc.agent.fpga_claims import ClaimProgrammer
        from kubeacc.agent.lifecycle.host import HostKernel
        from kubeacc.crds.resources import AcceleratorPolicy, as_dict

        kernel: HostKernel | None = None
        if self.opts.simulate_kernel:
            from kubeacc.synthetic.kernel import SyntheticKernel

            kernel = SyntheticKernel(self.opts.host_root)
        programmer = ClaimProgrammer(
            self.opts.host_root,
            self.opts.bitstream_dir,
            lambda: [as_dict(p) for p in self.client.list(AcceleratorPolicy)],
            kernel,
        )
        return programmer.ensure

    def add_plugin(self, plugin: NodePlugin) -> None:
        self._plugins.append(plugin)

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        prime_decoders()
        self._observe(discover(self.opts.host_root))
        self.driver.reconcile()
        if self._watch is not None:
            self._watch.start()
        if self.opts.kubelet_plugin:
            self.plugin = PluginServer(self.driver, self.board, self.opts.dra_socket)
            self.plugin.start()
            self.registration = RegistrationServer(
                self.opts.registry_dir,
                DRA_PLUGIN_TYPE,
                DRIVER_NAME,
                self.opts.dra_socket,
                SUPPORTED_SERVICES,
                on_registered=self._on_registered,
            )
            self.registration.start()
        for p in self._plugins:
            p.start(self.inventory)
        self._thread = threading.Thread(target=self._loop, name="agent-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        for p in self._plugins:
            p.stop()
        if self.registration is not None:
            self.registration.stop()
        if self.plugin is not None:
            self.plugin.stop()
        if self._watch is not None:
            self._watch.stop()
        self.driver.checkpoint.close()

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _on_registered(self) -> None:
        """A (re)started kubelet deletes the node's slices when it starts, in the background,
        possibly just after registering us: re-check the server now and for a little while."""
        self._force_until = time.monotonic() + 3 * self.opts.rediscover_interval + 5
        self._wake.set()

    def wait(self) -> None:
        """Block until :meth:`stop` is called (from a signal handler)."""
        while not self._stop.wait(3600):
            pass

    # -- loop -------------------------------------------------------------------------------
    def _observe(self, inv: Inventory) -> bool:
        changed = inv.devices != self.inventory.devices
        self.inventory = inv
        self.dra_inventory = dra_part(inv, self.opts.device_plugin_types)
        self._index = device_index(self.dra_inventory)
        self.board.update({n: (i.healthy, i.message) for n, i in self._index.items()})
        return changed

    def _loop(self) -> None:
        backoff = 0.0
        classes_done = not self.opts.apply_classes
        last_resync = 0.0
        next_discovery = time.monotonic() + self.opts.rediscover_interval
        while not self._stop.is_set():
            try:
                if not classes_done:
                    apply_device_classes(self.client)
                    classes_done = True
                now = time.monotonic()
                force = now - last_resync >= self.opts.resync_interval or now < self._force_until
                self.publisher.publish(slice_devices(self.dra_inventory), force=force)
                if force:
                    last_resync = time.monotonic()
                self.published.set()
                backoff = 0.0
            except Exception as exc:
                backoff = min(max(backoff * 2, 1.0), 30.0)
                log.warning("publishing failed (%s); retrying in %.0f s", exc, backoff)
                if self._stop.wait(backoff):
                    return
                continue
            wait = max(0.0, next_discovery - time.monotonic())
            woken = self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            if woken:
                continue  # publish (forced) right away; discovery keeps its schedule
            next_discovery = time.monotonic() + self.opts.rediscover_interval
            try:
                inv = discover(self.opts.host_root)
            except Exception:
                log.exception("discovery failed; keeping the last inventory")
                continue
            if self._observe(inv):
                log.info("inventory changed: %d devices", len(self.inventory.devices))
                for p in self._plugins:
                    p.update(self.inventory)
