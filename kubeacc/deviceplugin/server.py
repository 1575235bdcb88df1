"""One device-plugin gRPC server: one extended resource on the kubelet's plugin socket dir.

Handlers run on the agent's RPC loop (:mod:`kubeacc.node.rpc`); Allocate and
GetPreferredAllocation are pure computations over the current state, fast enough to answer
inline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.server import Stream

from kubeacc.deviceplugin.allocation import (
    NVIDIA_VISIBLE,
    AllocationError,
    ContainerDevices,
    allocate,
    check_known,
    device_id,
    prefer,
)
from kubeacc.deviceplugin.shared import DecisionLookup, Kind, shared_allocate, unit_ids
from kubeacc.model import Device, Inventory
from kubeacc.node.kubeletapi import deviceplugin_v1beta1_grpc as pb_grpc
from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from kubeacc.node.rpc import Changes, UnixServer, received, rpc_loop
from kubeacc.node.sharelimit import Limiter

if TYPE_CHECKING:
    # prometheus_client: only where the series are served (kubeacc.cli.probes)
    from kubeacc.metrics.agent import DevicePluginMetrics

    # the topology: at the first GetPreferredAllocation (DeviceState.graph)
    from kubeacc.topology.graph import TopologyGraph

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


class RegistrationError(RuntimeError):
    """The kubelet refused the resource, or could not be reached."""


@dataclass(frozen=True)
class ResourceState:
    """What one resource advertises now; replaced as a whole on every change."""

    devices: dict[str, Device]
    numa_distances: dict[int, list[int]]
    replicas: int
    strategy: str
    #: "" (devices as themselves) or a :class:`Kind` of anonymous shared units.
    shared: str = ""
    #: Hold memory shares to their limits (the type's ``enforce``).
    enforce: bool = True

    def listing(self) -> list[pb.Device]:
        if self.shared:
            ordered = [d for _, d in sorted(self.devices.items())]
            return [
                pb.Device(ID=i, health=HEALTHY if d.health.healthy else UNHEALTHY)
                for i, d in unit_ids(Kind(self.shared), ordered)
            ]
        out = []
        for bdf, dev in sorted(self.devices.items()):
            topology = (
                pb.TopologyInfo(nodes=[pb.NUMANode(ID=dev.numa_node)])
                if dev.numa_node >= 0
                else None
            )
            health = HEALTHY if dev.health.healthy else UNHEALTHY
            for replica in range(self.replicas) if self.replicas > 1 else [None]:
                out.append(pb.Device(ID=device_id(bdf, replica), health=health, topology=topology))
        return out

    def graph(self) -> TopologyGraph:
        """The devices' topology (loaded here: the plugin registers without it)."""
        from kubeacc.topology.graph import TopologyGraph

        inv = Inventory(devices=list(self.devices.values()))
        return TopologyGraph.from_inventory(inv)


class ResourceServer(pb_grpc.DevicePluginBase):
    """Serves one resource (e.g. ``kubeacc.io/gpu``) and registers it with the kubelet."""

    def __init__(
        self,
        resource: str,
        plugin_dir: Path,
        state: ResourceState,
        cdi_kind: str | None,
        metrics: DevicePluginMetrics | None = None,
        device_root: Path = Path("/"),
        decisions: DecisionLookup | None = None,
        limiter: Limiter | None = None,
        driver_devices: Callable[[], list[str]] | None = None,
    ):
        self.resource = resource
        #: The CDI names that bring the NVIDIA driver's user space (raises AllocationError
        #: when it cannot be found); None: not given.
        self.driver_devices = driver_devices
        self.limiter = limiter or Limiter()
        #: Where the device nodes are on the host (``DeviceSpec.host_path``).
        self.device_root = device_root
        self.decisions = decisions
        self.metrics = metrics
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / ("kubeacc-" + resource.split("/", 1)[1] + ".sock")
        self.cdi_kind = cdi_kind
        self._state = state
        self._graph: TopologyGraph | None = None
        self._changes = Changes()
        self._server: UnixServer | None = None
        #: ``DeviceSpec`` host path by container path: made once per device node, not per call.
        self._host_paths: dict[str, str] = {}

    # -- state ----------------------------------------------------------------------------

    @property
    def state(self) -> ResourceState:
        return self._state

    def update(self, state: ResourceState) -> None:
        """Publish a new device list to every ListAndWatch stream (only when it changed)."""
        if state == self._state:
            return
        self._state = state
        self._graph = None
        self._changes.bump()

    def _topology(self) -> TopologyGraph:
        graph = self._graph
        if graph is None:
            graph = self._graph = self._state.graph()
        return graph

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Serve on a fresh socket (the kubelet deletes plugin sockets when it restarts)."""
        self.stop()
        self._changes = Changes()
        server = UnixServer([self], self.socket)
        server.start()
        self._server = server

    def register(self, kubelet_socket: Path, timeout: float = 5.0) -> None:
        """Announce the resource to the kubelet; :class:`RegistrationError` when that fails."""
        request = pb.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket.name,
            resource_name=self.resource,
            options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
        )

        async def register() -> None:
            channel = Channel(path=str(kubelet_socket))
            try:
                await pb_grpc.RegistrationStub(channel).Register(request, timeout=timeout)
            finally:
                channel.close()

        try:
            rpc_loop().run(register(), timeout=timeout + 1)
        except (GRPCError, StreamTerminatedError, OSError, TimeoutError) as err:
            raise RegistrationError(f"{self.resource}: {err}") from err
        log.info("registered %s with the kubelet", self.resource)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._changes.close()  # ends the ListAndWatch streams
        server.stop(grace=0.5)

    def serving(self) -> bool:
        return self._server is not None and self.socket.exists()

    # -- the API --------------------------------------------------------------------------

    async def GetDevicePluginOptions(
        self, stream: Stream[pb.Empty, pb.DevicePluginOptions]
    ) -> None:
        await received(stream)
        await stream.send_message(pb.DevicePluginOptions(get_preferred_allocation_available=True))

    async def ListAndWatch(self, stream: Stream[pb.Empty, pb.ListAndWatchResponse]) -> None:
        await received(stream)
        changes = self._changes
        seen = -1
        while (version := await changes.wait(seen)) is not None:
            seen = version
            await stream.send_message(pb.ListAndWatchResponse(devices=self._state.listing()))

    async def GetPreferredAllocation(
        self, stream: Stream[pb.PreferredAllocationRequest, pb.PreferredAllocationResponse]
    ) -> None:
        request = await received(stream)
        graph = self._topology()
        state = self._state
        responses = []
        for number, req in enumerate(request.container_requests):
            if state.shared:  # anonymous units: any will do (the extender decided the GPU)
                ids = list(dict.fromkeys([*req.must_include_deviceIDs, *req.available_deviceIDs]))
                responses.append(
                    pb.ContainerPreferredAllocationResponse(deviceIDs=ids[: req.allocation_size])
                )
                continue
            try:
                check_known(state.devices, [*req.must_include_deviceIDs, *req.available_deviceIDs])
            except AllocationError as err:
                raise self._refused(number, err) from err
            ids = prefer(
                graph,
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                req.allocation_size,
                state.strategy,
            )
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        await stream.send_message(pb.PreferredAllocationResponse(container_responses=responses))

    async def Allocate(self, stream: Stream[pb.AllocateRequest, pb.AllocateResponse]) -> None:
        request = await received(stream)
        state = self._state
        devices = state.devices
        responses = []
        for number, req in enumerate(request.container_requests):
            try:
                if state.shared:
                    got = await self._shared(state, len(req.devices_ids))
                else:
                    got = allocate(devices, list(req.devices_ids), self.cdi_kind)
                if got.cdi_devices and NVIDIA_VISIBLE in got.envs and self.driver_devices:
                    got.cdi_devices += self.driver_devices()
            except AllocationError as err:
                if self.metrics is not None:
                    self.metrics.allocation_errors.labels(self.resource).inc()
                raise self._refused(number, err) from err
            responses.append(
                pb.ContainerAllocateResponse(
                    envs=got.envs,
                    devices=[
                        pb.DeviceSpec(container_path=n, host_path=self._host(n), permissions="rw")
                        for n in got.device_nodes
                    ],
                    cdi_devices=[pb.CDIDevice(name=n) for n in got.cdi_devices],
                    mounts=[
                        pb.Mount(container_path=c, host_path=h, read_only=True)
                        for h, c in got.read_only_mounts
                    ],
                    annotations={"kubeacc.io/units": got.envs["ACCELERATOR_UNITS"]},
                )
            )
        if self.metrics is not None:
            self.metrics.allocations.labels(self.resource).inc(len(responses))
        await stream.send_message(pb.AllocateResponse(container_responses=responses))

    def _host(self, node: str) -> str:
        path = self._host_paths.get(node)
        if path is None:
            path = self._host_paths[node] = str(self.device_root / node.lstrip("/"))
        return path

    async def _shared(self, state: ResourceState, count: int) -> ContainerDevices:
        if count <= 0:
            raise AllocationError("no devices requested")
        if self.decisions is None:
            raise AllocationError(
                "shared GPUs need the agent's API access to read kubeacc extender decisions"
            )
        kind = Kind(state.shared)
        found = await asyncio.to_thread(
            self.decisions.find, self.resource, kind, count, state.devices
        )
        # (a namespace's requirement is read from the API server: off the event loop)
        return await asyncio.to_thread(
            shared_allocate,
            kind,
            found,
            state.devices,
            self.cdi_kind,
            self.limiter,
            enforce=state.enforce,
        )

    def _refused(self, number: int, err: AllocationError) -> GRPCError:
        return GRPCError(
            Status.INVALID_ARGUMENT, f"{self.resource}: container request {number}: {err}"
        )

    async def PreStartContainer(
        self, stream: Stream[pb.PreStartContainerRequest, pb.PreStartContainerResponse]
    ) -> None:
        await received(stream)
        await stream.send_message(pb.PreStartContainerResponse())
