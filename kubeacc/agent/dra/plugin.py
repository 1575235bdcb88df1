"""The kubelet-facing gRPC server of the DRA driver.

One unix socket (``<kubelet-root>/plugins/kubeacc.io/dra.sock``) serves DRAPlugin in both API
versions the kubelet speaks (v1 and v1beta1, wire-identical apart from v1's optional
``share_id``) and the DRAResourceHealth stream.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.agent.dra.health import HealthBoard
from kubeacc.agent.kubeletapi import dra_v1_pb2 as v1
from kubeacc.agent.kubeletapi import dra_v1_pb2_grpc as v1_grpc
from kubeacc.agent.kubeletapi import dra_v1beta1_pb2 as v1beta1
from kubeacc.agent.kubeletapi import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubeacc.agent.kubeletapi import drahealth_v1alpha1_pb2 as hpb
from kubeacc.agent.kubeletapi import drahealth_v1alpha1_pb2_grpc as hpb_grpc
from kubeacc.agent.sockets import check_socket_path

log = logging.getLogger(__name__)

#: What registration advertises, most recent first ("<proto package tail>.<service>").
SUPPORTED_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


def _refs(req: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in req.claims]


class DRAPluginV1(v1_grpc.DRAPluginServicer):
    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        resp = v1.NodePrepareResourcesResponse()
        for uid, res in self.driver.prepare(_refs(request)).items():
            entry = resp.claims[uid]
            if res.error:
                entry.error = res.error
                continue
            for d in res.devices:
                entry.devices.add(
                    request_names=d.request_names,
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=d.cdi_device_ids,
                )
        return resp

    def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        resp = v1.NodeUnprepareResourcesResponse()
        for uid, err in self.driver.unprepare(_refs(request)).items():
            resp.claims[uid].error = err
        return resp


class DRAPluginV1beta1(v1beta1_grpc.DRAPluginServicer):
    """v1beta1 through the v1 implementation (same field numbers on the wire)."""

    def __init__(self, impl: DRAPluginV1) -> None:
        self.impl = impl

    def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        req = v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        out = self.impl.NodePrepareResources(req, context)
        resp: v1beta1.NodePrepareResourcesResponse = v1beta1.NodePrepareResourcesResponse()
        resp.ParseFromString(out.SerializeToString())
        return resp

    def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        req = v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        out = self.impl.NodeUnprepareResources(req, context)
        resp: v1beta1.NodeUnprepareResourcesResponse = v1beta1.NodeUnprepareResourcesResponse()
        resp.ParseFromString(out.SerializeToString())
        return resp


class ResourceHealth(hpb_grpc.DRAResourceHealthServicer):
    def __init__(self, board: HealthBoard) -> None:
        self.board = board

    def NodeWatchResources(
        self, request: hpb.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Any:
        active = threading.Event()
        active.set()
        context.add_callback(active.clear)
        log.info("kubelet opened the resource health stream")
        yield from self.board.watch(active)


def remove_socket(path: Path) -> None:
    path.unlink(missing_ok=True)


class PluginServer:
    """The DRA service socket. :meth:`start` removes a stale socket file first."""

    def __init__(self, driver: Driver, board: HealthBoard, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="dra-grpc")
        )
        impl = DRAPluginV1(driver)
        v1_grpc.add_DRAPluginServicer_to_server(impl, self.server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1beta1(impl), self.server)
        hpb_grpc.add_DRAResourceHealthServicer_to_server(ResourceHealth(board), self.server)
        self.board = board

    def start(self) -> None:
        check_socket_path(self.socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        remove_socket(self.socket_path)
        self.server.add_insecure_port(f"unix://{self.socket_path}")
        self.server.start()
        os.chmod(self.socket_path, 0o600)
        log.info("DRA plugin serving on %s", self.socket_path)

    def stop(self, grace: float = 1.0) -> None:
        self.board.close()
        self.server.stop(grace).wait()
        remove_socket(self.socket_path)
