"""The node agent: discovery loop, ResourceSlice publishing, kubelet plugins.

Start-up order: discover once, reconcile the DRA checkpoint with the CDI directory, serve the
DRA socket, then announce it in the kubelet's plugin registry. A background loop re-discovers
every ``rediscover_interval`` seconds and, only when something changed, updates the health
stream and the node's ResourceSlices (plus a full re-check of the server's copy every ``resync``
seconds, and whenever it changes: read from watches of the node's slices and Node, so an idle
node sends no request). Publishing failures (API server away) are logged and retried with
exponential backoff; the kubelet is served all the while.

The agent is built by :func:`kubeacc.agent.compose.compose_agent` (the composition root: the
host, the clients, the DRA driver and what it prepares with, handed in ready-made as
:class:`~kubeacc.agent.parts.AgentParts`); this module is the loop and what calls back into it.

Other kubelet plugins (the device-plugin mode) hook in through :class:`NodePlugin`: give them
to :meth:`Agent.add_plugin` and they are started, fed every new inventory and stopped with the
agent.

The node's Accelerator objects (:mod:`kubeacc.agent.accelerators`): the agent writes who uses
each device (``status.allocatedTo``: prepared claims and their pods, and the pods the kubelet's
pod-resources API names for device-plugin devices) and honours cordons (a taint in the slice,
Unhealthy in the device plugin; :mod:`kubeacc.agent.cordons`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.accelerators import AcceleratorSync
from kubeacc.agent.cordons import with_cordon_taints, with_cordons_unhealthy, with_unhealthy
from kubeacc.agent.dra import stale
from kubeacc.agent.dra.devices import DeviceInfo, device_index, slice_devices
from kubeacc.agent.dra.health import HealthBoard
from kubeacc.agent.dra.mig.nvml import nvml_for
from kubeacc.agent.dra.mig.publish import Published, device_infos
from kubeacc.agent.dra.mig.publish import publish as mig_publish
from kubeacc.agent.dra.plugin import SUPPORTED_SERVICES, PluginServer
from kubeacc.agent.dra.publishing import Publishing
from kubeacc.agent.dra.sharing.limits import Selector, unknown_memory
from kubeacc.agent.dra.sharing.policyshare import MigFilter, PolicyShares, mig_filters
from kubeacc.agent.dra.slices import SlicePublisher, chunk_devices, slice_fields
from kubeacc.agent.healthtaints import (
    Effect,
    HealthTaints,
    plugin_unhealthy,
    with_health_taints,
)
from kubeacc.agent.options import NodePaths, ObserveOptions, PublishOptions
from kubeacc.agent.parts import AgentParts
from kubeacc.agent.podresources import SOCKET as POD_RESOURCES_SOCKET
from kubeacc.agent.podresources import PodResourcesClient
from kubeacc.agent.registration import DRA_PLUGIN_TYPE, RegistrationServer
from kubeacc.agent.users import Users, device_plugin_users, dra_users, merge, plugin_accounts
from kubeacc.contracts.arenas import TRIM_INTERVAL, release_free_memory
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.api import API_VERSION, health_failing_thresholds
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import AcceleratorPolicy
from kubeacc.crds.watch import WatchCache, ignoring
from kubeacc.discovery import discover
from kubeacc.host import Host
from kubeacc.host.files import HostReadError
from kubeacc.metrics.http import ProbeServer
from kubeacc.model import DeviceType, Inventory
from kubeacc.node.nodelabels import NodeLabeler, labels_changed, node_labels
from kubeacc.node.sharelimit import CONTAINER_ACCOUNT_PREFIX
from kubeacc.node.supervise import supervised

if TYPE_CHECKING:
    from kubeacc.agent.telemetry.faults import DeviceFault
    from kubeacc.agent.telemetry.holders import Holders
    from kubeacc.agent.telemetry.report import FaultReporter
    from kubeacc.agent.telemetry.sampler import TelemetrySampler
    from kubeacc.agent.telemetry.series import Reading

log = logging.getLogger(__name__)


def dra_part(
    inv: Inventory,
    device_plugin_types: frozenset[DeviceType],
    publishing: Publishing | None = None,
) -> Inventory:
    """The devices DRA serves: those of the published types (default: all) but the device
    plugin's."""
    if publishing is not None:
        inv = publishing.keep(inv)
    if not device_plugin_types:
        return inv
    return inv.replace(devices=[d for d in inv.devices if d.type not in device_plugin_types])


def prime_decoders() -> None:
    """Build the API response decoders of the agent's threads before any of them runs.

    Two of the agent's threads (claim watch, publishing loop) decoding their first responses at
    the same moment crashed the agent with a segfault in msgspec about once in twenty starts;
    see :func:`kubeacc.apiclient.prime_decoders`.
    """
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

    from kubeacc.apiclient import prime_decoders as prime
    from kubeacc.crds.resources import Accelerator

    prime((ResourceClaim, ResourceSlice, DeviceClass, Node, Accelerator))


class PoliciesNotSynced(Exception):
    """The AcceleratorPolicy watch has no complete list (yet, or since it broke)."""


class NodePlugin(Protocol):
    """Another kubelet-facing plugin run by the agent (e.g. the device plugin)."""

    def start(self, inventory: Inventory) -> None: ...

    def update(self, inventory: Inventory) -> None: ...

    def stop(self) -> None: ...

    def unregistered(self) -> list[str]:
        """What the kubelet has not accepted (yet); empty when ready."""
        ...

    def share_enforcement(self, inv: Inventory) -> dict[tuple[str, str], str]:
        """(shared resource, GPU name) -> how a share of it is enforced (for allocatedTo)."""
        ...

    def shared_id_devices(self, inv: Inventory) -> dict[tuple[str, str], str]:
        """(shared resource, ID key) -> the GPU that the plugin's unit IDs stand for."""
        ...


#: A device-plugin container's share account is closed once its pod resources no longer list
#: it, no process holds anything in it, and it is at least this old (seconds).
ACCOUNT_GRACE_S = 300.0


class Agent:
    def __init__(
        self,
        host: Host,
        node: NodePaths,
        publish: PublishOptions,
        observe: ObserveOptions,
        parts: AgentParts,
    ) -> None:
        self.host = host
        self.node = node
        self.publish = publish
        self.observe = observe
        self.client = parts.client
        #: What a prepare reads (claims, policies): a deadline well inside the kubelet's.
        self.prepare_client = parts.prepare_client
        self.metrics = parts.metrics
        self.driver = parts.driver
        self.partitions = parts.partitions
        self.limiter = parts.limiter
        self.user_space = parts.user_space
        #: Loads claims' bitstreams before binding (kubeacc.agent.dra.fpga.binding); None: off.
        self.binder = parts.binder
        #: The devices are Cyborg's (kubeacc.agent.dra.cyborg); None: discovered on the host.
        self.cyborg = parts.cyborg
        self._watch = parts.claims
        self._status = parts.status
        self._relay = parts.relay
        self._relay.on_users_changed = self._users_changed
        self._stop = threading.Event()
        #: Wakes the loop early (stop, the kubelet registered us, a cordon changed).
        self._wake = threading.Event()
        #: Set (by the watches of the node's slices and Node) when the server's copy changed:
        #: the next pass re-checks it. The periodic re-check reads the same caches, so an idle
        #: node sends no request (it was a LIST, a GET and a PATCH per node every minute).
        self._recheck = False
        self.own_slices = WatchCache(
            self.client,
            ResourceSlice,
            fields=slice_fields(node.node_name),
            on_change=self._server_changed,
            wake_if=ignoring(),
            name=f"slice-watch-{node.node_name}",
        )
        self.publisher = SlicePublisher(self.client, node.node_name, cache=self.own_slices)
        self.publisher.on_restricted = self._not_enforced
        self.node_cache: WatchCache | None = None
        self.labeler: NodeLabeler | None = None
        if publish.node_labels:
            self.node_cache = WatchCache(
                self.client,
                Node,
                fields={"metadata.name": node.node_name},
                on_change=self._server_changed,
                wake_if=labels_changed,
                name=f"node-watch-{node.node_name}",
            )
            self.labeler = NodeLabeler(self.client, node.node_name, cache=self.node_cache)
        self.board = HealthBoard(node.node_name)
        self.accelerators: AcceleratorSync | None = None
        if observe.sync_accelerators:
            self.accelerators = AcceleratorSync(
                self.client,
                node.node_name,
                self._users,
                on_cordon=self._wake.set,
                poll=observe.users_poll_interval if publish.device_plugin_types else 30.0,
            )
        #: AcceleratorPolicies, listed once and then watched (a change wakes the loop): at
        #: 5,000 nodes a LIST per node and pass would be ~1,000 LISTs/s on the API server.
        self.policies = WatchCache(
            self.client,
            AcceleratorPolicy,
            on_change=self._wake.set,
            wake_if=ignoring(("status",), ("metadata", "resourceVersion")),
            name=f"policy-watch-{node.node_name}",
        )
        #: Memory-sharing and MIG AcceleratorPolicies, from the watch at each loop pass.
        self.policy_shares = PolicyShares(self._list_policies)
        self._mig = Published()
        #: (policy uid, message) of the MIG policy problems already reported as events.
        self._mig_warned: set[tuple[str, str]] = set()
        #: Messages of MemorySharedUnknownMemory already recorded (once per agent run each).
        self._memory_warned: set[str] = set()
        self.plugin: PluginServer | None = None
        self.registration: RegistrationServer | None = None
        self._plugins: list[NodePlugin] = []
        #: The cordons the device plugins were last given.
        self._plugin_cordons: dict[str, str] = {}
        #: Devices the device plugin serves Unhealthy for a health taint (device -> why).
        self._plugin_sick: dict[str, str] = {}
        #: Until then, every loop pass re-reads the server's slices (see _on_registered).
        self._force_until = 0.0
        self._thread: threading.Thread | None = None
        #: Unprepares recorded claims no pod can use, at start and then periodically
        #: (kubeacc.agent.dra.stale).
        self._sweeper: threading.Thread | None = None
        self.inventory = Inventory()
        self.dra_inventory = Inventory()
        self.published = threading.Event()
        self.probes: ProbeServer | None = None
        self.telemetry: TelemetrySampler | None = None
        self._faults: FaultReporter | None = None
        self.health = HealthTaints(observe.health_taint_hold) if observe.health_taints else None
        self._health_lock = threading.Lock()
        self._label_error = ""
        #: Why the last discovery pass failed ("" when it did not): the agent then serves its
        #: last good inventory and says so in /readyz.
        self.discovery_error = ""

    @property
    def _index(self) -> dict[str, DeviceInfo]:
        """The DRA devices of the last pass, by name (the driver reads them through the relay)."""
        return self._relay.index

    def _list_policies(self) -> list[dict[str, Any]]:
        """The watched policies; an error while the watch is not synced (PolicyShares then
        keeps what it had: an API server away must not un-share devices claims use)."""
        if not self.policies.synced.is_set():
            raise PoliciesNotSynced("the AcceleratorPolicy watch is not synced yet")
        return self.policies.items()

    def _mig_filters(self) -> dict[str, MigFilter]:
        """What the MIG policies let each MIG GPU publish; a selected GPU that cannot follow
        its policy gets one Warning event on the policy (per policy and message)."""
        offered: dict[str, set[str]] = {gpu: set() for gpu in self._mig.whole}
        for name, part in self._mig.index.items():
            if part.fixed_gi is None and (gpu := self._mig.owner.get(name)) in offered:
                offered[gpu].add(part.profile)
        filters, problems = mig_filters(
            self.policy_shares.migs, self.dra_inventory.devices, offered
        )
        for policy, message in problems:
            if (policy.uid, message) in self._mig_warned:
                continue
            self._mig_warned.add((policy.uid, message))
            emit_event(
                self.client,
                {
                    "apiVersion": API_VERSION,
                    "kind": "AcceleratorPolicy",
                    "metadata": {"name": policy.policy, "uid": policy.uid},
                },
                "MigPolicyNotApplied",
                f"node {self.node.node_name}: {message}",
                warning=True,
                component=f"kubeacc-agent-{self.node.node_name}",  # the admission rule
            )
        return filters

    def _warn_unknown_memory(self, shared: list[Selector]) -> None:
        """Devices a memory-shared selector or policy picks but whose memory is unknown are
        published whole: one Warning Event on the Node per selector saying so."""
        for message in unknown_memory(self.dra_inventory.devices, shared):
            if message not in self._memory_warned:
                self._memory_warned.add(message)
                self._node_warning("MemorySharedUnknownMemory", message)

    def _not_enforced(self, message: str) -> None:
        """The cluster drops slice fields kube-acc relies on: one Event on the Node."""
        self._node_warning("DRAFeaturesMissing", message)

    def _node_warning(self, reason: str, message: str) -> None:
        """A Warning Event on this agent's Node."""
        self._node_event(reason, message, warning=True)

    def _node_event(self, reason: str, message: str, *, warning: bool) -> None:
        """An Event on this agent's Node (uid: the node's name, as the kubelet's own node
        events have it, so ``kubectl describe node`` lists it)."""
        node = self.node.node_name
        emit_event(
            self.client,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": node}},
            reason,
            message,
            warning=warning,
            component=f"kubeacc-agent-{node}",  # the admission rule
        )

    def _server_changed(self) -> None:
        self._recheck = True
        self._wake.set()

    def _watches(self) -> list[WatchCache]:
        return [w for w in (self.policies, self.own_slices, self.node_cache) if w is not None]

    def add_plugin(self, plugin: NodePlugin) -> None:
        self._plugins.append(plugin)

    # -- users and cordons ------------------------------------------------------------------
    def _users_changed(self) -> None:
        if self.accelerators is not None:
            self.accelerators.wake()

    def _cordoned(self) -> dict[str, str]:
        return self.accelerators.cordoned() if self.accelerators is not None else {}

    def _claim(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self._watch.cached(namespace, name, uid) if self._watch is not None else None

    def _plugin_pods(self) -> tuple[Any, dict[str, str], dict[tuple[str, str], str]] | None:
        """What the kubelet's pod resources say of the device plugin's devices: the pods, the
        plugin's devices by PCI address, and its shared ids -> device (None: no plugin runs;
        raises when the kubelet cannot be asked)."""
        if not (self.publish.device_plugin_types and self.node.kubelet_plugin):
            return None
        client = PodResourcesClient(self.node.kubelet_root / POD_RESOURCES_SOCKET)
        by_address = {
            d.pci.bus_id: d.name
            for d in self.inventory.devices
            if d.type in self.publish.device_plugin_types and d.pci is not None
        }
        shared_ids: dict[tuple[str, str], str] = {}
        for p in self._plugins:
            shared_ids |= p.shared_id_devices(self.inventory)
        return client.list(), by_address, shared_ids

    def _users(self) -> Users:
        """Who uses each device now (raises when the kubelet cannot be asked)."""
        parts = [dra_users(self.driver.prepared(), self._claim, self._index)]
        plugin = self._plugin_pods()
        if plugin is not None:
            pods, by_address, shared_ids = plugin
            enforcement: dict[tuple[str, str], str] = {}
            for p in self._plugins:
                enforcement |= p.share_enforcement(self.inventory)
            parts.append(device_plugin_users(pods, by_address, enforcement, shared_ids))
            if self.limiter.accounts is not None:  # accounts of containers that are gone
                self.limiter.accounts.prune(
                    plugin_accounts(pods), CONTAINER_ACCOUNT_PREFIX, ACCOUNT_GRACE_S
                )
        return merge(*parts)

    def _holders(self) -> Holders:
        """Who holds each device, as telemetry labels (kubeacc.agent.telemetry.holders)."""
        from kubeacc.agent.telemetry import holders

        parts = [holders.dra_holders(self.driver.prepared(), self._claim, self._index)]
        plugin = self._plugin_pods()
        if plugin is not None:
            parts.append(holders.device_plugin_holders(*plugin))
        return holders.merge(*parts)

    def _start_telemetry(self) -> None:
        """Device telemetry on the metrics registry (only where metrics are served)."""
        if self.probes is None or self.observe.telemetry_interval <= 0:
            return
        from kubeacc.agent.telemetry.sampler import TelemetrySampler

        self.telemetry = TelemetrySampler(
            self.node.node_name,
            self.host,
            nvml_for(self.host, self.publish.nvml),
            lambda: self.inventory,
            self._holders,
            self.observe.telemetry_interval,
            on_faults=self._device_faults,
            health_thresholds=lambda: health_failing_thresholds(self._list_policies()),
            on_pass=self._device_health if self.health is not None else None,
        )
        self.metrics.registry.register(self.telemetry.collector)
        self.telemetry.start()

    def _device_faults(self, faults: list[DeviceFault]) -> None:
        """Faults the telemetry saw appear: one Warning Event on the Node each, for people, and
        ``status.lastFault`` on the device's Accelerator, for the controller's remediation."""
        for f in faults:
            what = f"XID {f.xid}" if f.xid is not None else str(f.event)
            detail = f" ({f.detail})" if f.detail else ""
            log.warning("device %s: %s%s", f.device, what, detail)
            self._node_warning("DeviceFault", f"device {f.device}: {what}{detail}")
        if self._faults is None:
            from kubeacc.agent.telemetry.report import FaultReporter

            self._faults = FaultReporter(self.client, self.node.node_name)
        self._faults.report(faults)

    def _device_health(self, faults: list[DeviceFault], readings: list[Reading]) -> None:
        """One telemetry pass through the health taints: each step an Event on the Node and a
        metric, and the slices republished when a taint came or went."""
        assert self.health is not None
        with self._health_lock:
            changes = self.health.update(faults, readings, time.monotonic())
            self.health.forget(d.name for d in self.inventory.devices)
            taints = self.health.taints()
        for c in changes:
            self.metrics.health_taint_steps.labels(c.step, c.effect.value).inc()
            if c.damped:
                self.metrics.health_taint_damped.inc()
            held = f", held {c.hold:.0f} s (flapping)" if c.damped else ""
            if c.step == "lifted":
                msg = f"device {c.device}: health taint {c.reason} ({c.effect}) lifted"
                self._node_event("DeviceTaintLifted", msg, warning=False)
            else:
                msg = f"device {c.device}: tainted {c.effect} ({c.reason}){held}"
                self._node_event("DeviceTainted", msg, warning=True)
        if changes:
            for effect in Effect:
                n = sum(1 for t in taints.values() if t["effect"] == effect.value)
                self.metrics.health_taints.labels(effect.value).set(n)
            self._wake.set()

    def _health_taints(self) -> dict[str, dict[str, str]]:
        if self.health is None:
            return {}
        with self._health_lock:
            return self.health.taints()

    def _plugin_inventory(self) -> Inventory:
        """What the device plugin serves: cordoned devices and those with a health taint that
        keeps new work off advertised Unhealthy (kubeacc.agent.healthtaints.plugin_unhealthy)."""
        self._plugin_cordons = self._cordoned()
        self._plugin_sick = plugin_unhealthy(self._health_taints())
        inv = with_unhealthy(self.inventory, self._plugin_sick)
        return with_cordons_unhealthy(inv, self._plugin_cordons)

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        if self.observe.metrics_address is not None:
            self.probes = ProbeServer(
                self.observe.metrics_address,
                self.metrics.registry,
                healthy=self.failing_health,
                ready=self.not_ready,
            )
            self.probes.start()
        prime_decoders()
        if self.limiter.accounts is not None:  # the shares' accounts, before any prepare
            self.limiter.accounts.start()
        self._observe(self._discover())
        self.driver.reconcile()
        if self._status is not None:
            self.driver.start_status(self._status)
        for w in self._watches():
            w.start()
        if self.binder is not None:
            self.binder.start()
        if self._watch is not None:
            self._watch.start()
        if self.accelerators is not None:
            self.accelerators.start()
        if self.node.kubelet_plugin:
            self.plugin = PluginServer(self.driver, self.board, self.node.dra_socket)
            self.plugin.start()
            self.registration = RegistrationServer(
                self.node.registry_dir,
                DRA_PLUGIN_TYPE,
                DRIVER_NAME,
                self.node.dra_socket,
                SUPPORTED_SERVICES,
                on_registered=self._on_registered,
            )
            self.registration.start()
            self._sweeper = threading.Thread(
                target=self._sweep_unused, name="unused-claims", daemon=True
            )
            self._sweeper.start()
        for p in self._plugins:
            p.start(self._plugin_inventory())
        self._start_telemetry()
        self._thread = supervised(
            "agent-loop",
            self._loop,
            self._stop,
            on_restart=lambda _exc: self.metrics.loop_restarts.labels("agent").inc(),
        )

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
        if self.driver.status is not None:
            self.driver.status.stop()
        if self._watch is not None:
            self._watch.stop()
        if self.binder is not None:
            self.binder.stop()
        if self.cyborg is not None:
            self.cyborg.stop()
        if self.accelerators is not None:
            self.accelerators.stop()
        if self.telemetry is not None:
            self.telemetry.stop()
        for w in self._watches():
            w.close()
        if self._sweeper is not None:
            self._sweeper.join(timeout=15)
        if self.limiter.accounts is not None:
            self.limiter.accounts.stop()
        self.driver.checkpoint.close()
        if self.probes is not None:
            self.probes.stop()

    def _sweep_unused(self) -> None:
        """Unprepare recorded claims no pod can use (kubeacc.agent.dra.stale): at start, once
        the API server has answered for every one of them; then every ``stale.INTERVAL_S``
        those found unused for ``stale.GRACE_S`` (what the kubelet missed)."""
        pause = 1.0
        while not self._stop.is_set():
            try:
                stale.sweep(self.driver)
                break
            except Exception as exc:
                log.warning("checking prepared claims failed (%s); again in %.0f s", exc, pause)
            self._stop.wait(pause)
            pause = min(pause * 2, 60.0)
        sweeper = stale.Sweeper(self.driver)
        while not self._stop.wait(stale.INTERVAL_S):
            try:
                sweeper.pass_once()
            except Exception as exc:
                log.debug("checking prepared claims failed (%s); again later", exc)

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    # -- probes -----------------------------------------------------------------------------
    def not_ready(self) -> list[str]:
        """Why the agent does not serve its node yet (``/readyz``); empty when it does."""
        reasons = []
        if self.registration is not None and not self.registration.registered.is_set():
            reasons.append(f"DRA plugin {DRIVER_NAME} not registered with the kubelet")
        if not self.published.is_set():
            reasons.append("ResourceSlices not published yet")
        if self.discovery_error:
            reasons.append(f"serving the last good inventory: {self.discovery_error}")
        for p in self._plugins:
            reasons += [
                f"device plugin {r} not registered with the kubelet" for r in p.unregistered()
            ]
        return reasons

    def failing_health(self) -> list[str]:
        """``/healthz``: the discovery/publishing loop must be running."""
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return ["agent loop stopped"]
        return []

    def _on_registered(self) -> None:
        """A (re)started kubelet deletes the node's slices when it starts, in the background,
        possibly just after registering us: re-check the server now and for a little while."""
        self._force_until = time.monotonic() + 3 * self.publish.rediscover_interval + 5
        self.metrics.registrations.labels("dra").inc()
        self._wake.set()

    def wait(self) -> None:
        """Block until :meth:`stop` is called (from a signal handler)."""
        while not self._stop.wait(3600):
            pass

    def _label(self, force: bool) -> None:
        """Node labels are a convenience: failing to write them (say, RBAC without ``patch``
        on nodes) must not hold up discovery and slices, so it is logged, once per message."""
        if self.labeler is None:
            return
        try:
            self.labeler.apply(node_labels(self.inventory), force=force)
            self._label_error = ""
        except Exception as exc:
            if str(exc) != self._label_error:
                log.warning("cannot label node %s: %s", self.node.node_name, exc)
            self._label_error = str(exc)

    # -- loop -------------------------------------------------------------------------------
    def _discover(self) -> Inventory:
        """One strict pass: :class:`HostReadError` when the machine failed a read (or Cyborg's
        error when it did not answer whole)."""
        if self.cyborg is not None:
            return self.cyborg.discover()
        return discover(
            self.host,
            config=self.publish.discovery_config,
            nvml=self.publish.nvml,
            strict=True,
        )

    def _rediscover(self) -> Inventory | None:
        """The host's inventory now, or None (the last good one stands) when the pass failed:
        slices and labels change only on what a complete pass saw."""
        try:
            inv = self._discover()
        except Exception as exc:
            self.metrics.discovery_failures.inc()
            message = str(exc) if isinstance(exc, HostReadError) else f"discovery failed: {exc}"
            if not self.discovery_error:  # once per episode: log, metric and an Event
                self._node_warning("DiscoveryFailed", f"{message}; serving the last good inventory")
            self.discovery_error = message
            return None
        if self.discovery_error:
            log.info("discovery works again (%s was the last failure)", self.discovery_error)
            self.discovery_error = ""
        return inv

    def _observe(self, inv: Inventory) -> bool:
        changed = inv.devices != self.inventory.devices
        self.inventory = inv
        self.metrics.observe_inventory(inv)
        self.dra_inventory = dra_part(
            inv, self.publish.device_plugin_types, self.publish.publishing
        )
        gpus, uuids = self.partitions.read(self.dra_inventory)
        self._mig = mig_publish(
            self.dra_inventory,
            slice_devices(
                self.dra_inventory,
                self.publish.memory_shared,
                self.limiter,
                vfs=self.publish.publishing.vfs,
            ),
            gpus,
            self.partitions.ours(),
            uuids,
        )
        index = {
            **device_index(self.dra_inventory, vfs=self.publish.publishing.vfs),
            **device_infos(self.dra_inventory, self._mig),
        }
        for name in [n for n, e in self._mig.whole.items() if e is None]:
            index.pop(name, None)  # a MIG GPU with fixed instances is not whole
        self._relay.index = index
        self.board.update({n: (i.healthy, i.message) for n, i in index.items()})
        return changed

    def _loop(self) -> None:
        backoff, failures = 0.0, 0
        classes_done = not self.publish.apply_classes
        last_resync = 0.0
        next_trim = time.monotonic() + TRIM_INTERVAL
        next_discovery = time.monotonic() + self.publish.rediscover_interval
        while not self._stop.is_set():
            try:
                if not classes_done:
                    from kubeacc.agent.dra.classes import apply_device_classes

                    apply_device_classes(self.client)
                    classes_done = True
                now = time.monotonic()
                force = now - last_resync >= self.publish.resync_interval or now < self._force_until
                force, self._recheck = force or self._recheck, False
                shared: list[Selector] = [
                    *self.publish.memory_shared,
                    *self.policy_shares.refresh(),
                ]
                self._warn_unknown_memory(shared)
                devices = with_health_taints(
                    with_cordon_taints(
                        self._mig.apply(
                            slice_devices(
                                self.dra_inventory,
                                shared,
                                self.limiter,
                                vfs=self.publish.publishing.vfs,
                            ),
                            self._mig_filters(),
                        ),
                        self._cordoned(),
                    ),
                    self._health_taints(),
                )
                if self.binder is not None:
                    from kubeacc.agent.dra.fpga.binding import with_binding_conditions

                    fpgas = {n for n, i in self._index.items() if i.type == "fpga"}
                    devices = with_binding_conditions(devices, fpgas)
                if self.publisher.publish(
                    devices, force=force, counter_sets=self._mig.counter_sets
                ):
                    self.metrics.slice_publishes.inc()
                self.metrics.resource_slices.set(len(chunk_devices(devices)))
                self.metrics.published_devices.set(len(devices))
                self.published.set()
                self._label(force)
                if force:
                    last_resync = time.monotonic()
                if failures:
                    log.info("publishing works again after %d failed tries", failures)
                backoff, failures = 0.0, 0
            except Exception as exc:
                self.metrics.publish_errors.inc()
                failures += 1
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
            if self._plugins and (
                self._cordoned() != self._plugin_cordons
                or plugin_unhealthy(self._health_taints()) != self._plugin_sick
            ):
                inv = self._plugin_inventory()
                for p in self._plugins:
                    p.update(inv)
            if woken:
                continue  # publish (forced) right away; discovery keeps its schedule
            next_discovery = time.monotonic() + self.publish.rediscover_interval
            if next_discovery >= next_trim:
                release_free_memory()
                next_trim = time.monotonic() + TRIM_INTERVAL
            found = self._rediscover()
            if found is None:
                continue
            if self._observe(found):
                log.info("inventory changed: %d devices", len(self.inventory.devices))
                plugin_inv = self._plugin_inventory()
                for p in self._plugins:
                    p.update(plugin_inv)
