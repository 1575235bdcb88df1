"""The kubelet-facing gRPC server of the DRA driver.

One unix socket (``<kubelet-root>/plugins/kubeacc.io/dra.sock``) serves DRAPlugin in both API
versions the kubelet speaks (v1 and v1beta1, wire-identical apart from v1's optional
``share_id``) and the DRAResourceHealth stream, in v1 and v1alpha1 (wire-identical too). Prepare
reads the API server and fsyncs, so it runs on the RPC worker threads, never on the loop.
Unprepare runs on the loop when it can do so without waiting or touching a device
(:meth:`Driver.unprepare_nowait`: files only, no flush), else on a worker thread too: the hop to
a thread and back costs more than the work on a busy node.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from grpclib.server import Stream

from kubeacc.agent.dra.driver import Driver
from kubeacc.agent.dra.health import HealthBoard
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.node.kubeletapi import dra_v1_grpc as v1_grpc
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1
from kubeacc.node.kubeletapi import dra_v1beta1_grpc as v1beta1_grpc
from kubeacc.node.kubeletapi import dra_v1beta1_pb2 as v1beta1
from kubeacc.node.kubeletapi import drahealth_v1_grpc as hv1_grpc
from kubeacc.node.kubeletapi import drahealth_v1_pb2 as hv1
from kubeacc.node.kubeletapi import drahealth_v1alpha1_grpc as hv1alpha1_grpc
from kubeacc.node.kubeletapi import drahealth_v1alpha1_pb2 as hv1alpha1
from kubeacc.node.rpc import UnixServer, received

log = logging.getLogger(__name__)

#: What registration advertises, most recent first ("<proto package tail>.<service>"). The
#: health service is named too: a 1.37 kubelet opens the health stream only with a plugin
#: that advertises it, in the first of its versions it knows (v1, else v1alpha1); a 1.36 one
#: knows only v1alpha1, opens it with every plugin and ignores the extra names.
SUPPORTED_SERVICES = [
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
]


def _refs(req: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in req.claims]


class DRAPlugin:
    """NodePrepareResources / NodeUnprepareResources in v1 messages, off the loop."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def prepare(self, request: v1.NodePrepareResourcesRequest) -> v1.NodePrepareResourcesResponse:
        resp = v1.NodePrepareResourcesResponse()
        for uid, res in self.driver.prepare(_refs(request)).items():
            entry = resp.claims[uid]
            if res.error:
                entry.error = res.error
                continue
            for d in res.devices:
                dev = entry.devices.add(
                    request_names=d.request_names,
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=d.cdi_device_ids,
                )
                if d.share_id is not None:
                    dev.share_id = d.share_id
        return resp

    def unprepare(
        self, request: v1.NodeUnprepareResourcesRequest
    ) -> v1.NodeUnprepareResourcesResponse:
        return _unprepared(self.driver.unprepare(_refs(request)))

    def unprepare_nowait(
        self, request: v1.NodeUnprepareResourcesRequest
    ) -> v1.NodeUnprepareResourcesResponse | None:
        """The answer, or None where it needs a worker thread (Driver.unprepare_nowait)."""
        out = self.driver.unprepare_nowait(_refs(request))
        return None if out is None else _unprepared(out)

    async def unprepare_here(
        self, request: v1.NodeUnprepareResourcesRequest
    ) -> v1.NodeUnprepareResourcesResponse:
        """On the loop where that cannot block it, else on a worker thread."""
        resp = self.unprepare_nowait(request)
        return resp if resp is not None else await asyncio.to_thread(self.unprepare, request)


def _unprepared(out: dict[str, str]) -> v1.NodeUnprepareResourcesResponse:
    resp = v1.NodeUnprepareResourcesResponse()
    for uid, err in out.items():
        resp.claims[uid].error = err
    return resp


class DRAPluginV1(v1_grpc.DRAPluginBase):
    def __init__(self, impl: DRAPlugin) -> None:
        self.impl = impl

    async def NodePrepareResources(
        self,
        stream: Stream[v1.NodePrepareResourcesRequest, v1.NodePrepareResourcesResponse],
    ) -> None:
        request = await received(stream)
        await stream.send_message(await asyncio.to_thread(self.impl.prepare, request))

    async def NodeUnprepareResources(
        self,
        stream: Stream[v1.NodeUnprepareResourcesRequest, v1.NodeUnprepareResourcesResponse],
    ) -> None:
        request = await received(stream)
        await stream.send_message(await self.impl.unprepare_here(request))


class DRAPluginV1beta1(v1beta1_grpc.DRAPluginBase):
    """v1beta1 through the v1 implementation (same field numbers on the wire)."""

    def __init__(self, impl: DRAPlugin) -> None:
        self.impl = impl

    async def NodePrepareResources(
        self,
        stream: Stream[v1beta1.NodePrepareResourcesRequest, v1beta1.NodePrepareResourcesResponse],
    ) -> None:
        request = await received(stream)
        req = v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        out = await asyncio.to_thread(self.impl.prepare, req)
        await stream.send_message(
            v1beta1.NodePrepareResourcesResponse.FromString(out.SerializeToString())
        )

    async def NodeUnprepareResources(
        self,
        stream: Stream[
            v1beta1.NodeUnprepareResourcesRequest, v1beta1.NodeUnprepareResourcesResponse
        ],
    ) -> None:
        request = await received(stream)
        req = v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        out = await self.impl.unprepare_here(req)
        await stream.send_message(
            v1beta1.NodeUnprepareResourcesResponse.FromString(out.SerializeToString())
        )


def _health_opened(version: str, metrics: AgentMetrics | None) -> None:
    log.info("kubelet opened the resource health stream (%s.DRAResourceHealth)", version)
    if metrics is not None:
        metrics.health_streams.labels(version).inc()


class ResourceHealthV1(hv1_grpc.DRAResourceHealthBase):
    def __init__(self, board: HealthBoard, metrics: AgentMetrics | None = None) -> None:
        self.board = board
        self.metrics = metrics

    async def NodeWatchResources(
        self, stream: Stream[hv1.NodeWatchResourcesRequest, hv1.NodeWatchResourcesResponse]
    ) -> None:
        await received(stream)
        _health_opened("v1", self.metrics)
        async for message in self.board.watch():
            await stream.send_message(message)


class ResourceHealthV1alpha1(hv1alpha1_grpc.DRAResourceHealthBase):
    """The same stream in v1alpha1 messages (what a 1.36 kubelet opens)."""

    def __init__(self, board: HealthBoard, metrics: AgentMetrics | None = None) -> None:
        self.board = board
        self.metrics = metrics

    async def NodeWatchResources(
        self,
        stream: Stream[hv1alpha1.NodeWatchResourcesRequest, hv1alpha1.NodeWatchResourcesResponse],
    ) -> None:
        await received(stream)
        _health_opened("v1alpha1", self.metrics)
        async for message in self.board.watch():
            await stream.send_message(
                hv1alpha1.NodeWatchResourcesResponse.FromString(message.SerializeToString())
            )


class PluginServer:
    """The DRA service socket. :meth:`start` removes a stale socket file first."""

    def __init__(self, driver: Driver, board: HealthBoard, socket_path: Path) -> None:
        self.socket_path = socket_path
        impl = DRAPlugin(driver)
        self.server = UnixServer(
            [
                DRAPluginV1(impl),
                DRAPluginV1beta1(impl),
                ResourceHealthV1(board, driver.metrics),
                ResourceHealthV1alpha1(board, driver.metrics),
            ],
            socket_path,
            mode=0o600,
        )
        self.board = board

    def start(self) -> None:
        self.server.start()
        log.info("DRA plugin serving on %s", self.socket_path)

    def stop(self, grace: float = 1.0) -> None:
        self.board.close()
        self.server.stop(grace)
