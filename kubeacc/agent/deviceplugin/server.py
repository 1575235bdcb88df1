"""One device-plugin gRPC server: one extended resource on the kubelet's plugin socket dir."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from kubeacc.agent.deviceplugin.allocation import (
    AllocationError,
    allocate,
    device_id,
    prefer,
)
from kubeacc.agent.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from kubeacc.agent.kubeletapi import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from kubeacc.model import Device, Inventory
from kubeacc.topology.graph import TopologyGraph

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True)
class ResourceState:
    """What one resource advertises now; replaced as a whole on every change."""

    devices: dict[str, Device]
    numa_distances: dict[int, list[int]]
    replicas: int
    strategy: str

    def listing(self) -> list[pb.Device]:
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
        inv = Inventory(devices=list(self.devices.values()))
        return TopologyGraph.from_inventory(inv)


class ResourceServer(pb_grpc.DevicePluginServicer):
    """Serves one resource (e.g. ``kubeacc.io/gpu``) and registers it with the kubelet."""

    def __init__(self, resource: str, plugin_dir: Path, state: ResourceState, cdi_kind: str | None):
        self.resource = resource
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / ("kubeacc-" + resource.split("/", 1)[1] + ".sock")
        self.cdi_kind = cdi_kind
        self._state = state
        self._graph: TopologyGraph | None = None
        self._changed = threading.Condition()
        self._version = 0
        self._server: grpc.Server | None = None
        self._stopping = False

    # -- state ----------------------------------------------------------------------------

    @property
    def state(self) -> ResourceState:
        return self._state

    def update(self, state: ResourceState) -> None:
        """Publish a new device list to every ListAndWatch stream (only when it changed)."""
        if state == self._state:
            return
        with self._changed:
            self._state = state
            self._graph = None
            self._version += 1
            self._changed.notify_all()

    def _topology(self) -> TopologyGraph:
        graph = self._graph
        if graph is None:
            graph = self._graph = self._state.graph()
        return graph

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Serve on a fresh socket (the kubelet deletes plugin sockets when it restarts)."""
        self.stop()
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        if self.socket.exists() or self.socket.is_symlink():
            self.socket.unlink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="dp"))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        self._stopping = False
        server.start()
        self._server = server

    def register(self, kubelet_socket: Path, timeout: float = 5.0) -> None:
        """Announce the resource to the kubelet; raises grpc.RpcError when it refuses."""
        with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
            pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=API_VERSION,
                    endpoint=self.socket.name,
                    resource_name=self.resource,
                    options=pb.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=timeout,
            )
        log.info("registered %s with the kubelet", self.resource)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        server.stop(grace=0.5).wait(2)
        with contextlib.suppress(OSError):
            self.socket.unlink()

    def serving(self) -> bool:
        return self._server is not None and self.socket.exists()

    # -- the API --------------------------------------------------------------------------

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        with self._changed:
            seen = self._version
            listing = self._state.listing()
        yield pb.ListAndWatchResponse(devices=listing)
        while context.is_active():
            with self._changed:
                self._changed.wait_for(self._news(seen), timeout=1.0)
                if self._stopping:
                    return
                if self._version == seen:
                    continue
                seen = self._version
                listing = self._state.listing()
            yield pb.ListAndWatchResponse(devices=listing)

    def _news(self, seen: int) -> Callable[[], bool]:
        return lambda: self._version != seen or self._stopping

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        graph = self._topology()
        state = self._state
        responses = []
        for req in request.container_requests:
            ids = prefer(
                graph,
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                req.allocation_size,
                state.strategy,
            )
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        devices = self._state.devices
        responses = []
        for number, req in enumerate(request.container_requests):
            try:
                got = allocate(devices, list(req.devices_ids), self.cdi_kind)
            except AllocationError as err:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.resource}: container request {number}: {err}",
                )
            responses.append(
                pb.ContainerAllocateResponse(
                    envs=got.envs,
                    devices=[
                        pb.DeviceSpec(container_path=n, host_path=n, permissions="rw")
                        for n in got.device_nodes
                    ],
                    cdi_devices=[pb.CDIDevice(name=n) for n in got.cdi_devices],
                    annotations={"kubeacc.io/units": got.envs["ACCELERATOR_UNITS"]},
                )
            )
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
