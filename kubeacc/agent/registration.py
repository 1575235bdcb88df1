"""Kubelet plugin registration (pluginregistration.v1): a socket in ``plugins_registry``.

The kubelet's plugin watcher notices the socket, calls GetInfo, validates the answer, connects
to the advertised endpoint and reports the outcome with NotifyRegistrationStatus. Removing the
socket deregisters the plugin. Shared by every kubelet plugin the agent runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from kubeacc.agent.kubeletapi import pluginregistration_v1_pb2 as rpb
from kubeacc.agent.kubeletapi import pluginregistration_v1_pb2_grpc as rpb_grpc
from kubeacc.agent.sockets import check_socket_path

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"


class _Registration(rpb_grpc.RegistrationServicer):
    def __init__(
        self,
        info: rpb.PluginInfo,
        registered: threading.Event,
        on_registered: Callable[[], None] | None,
    ) -> None:
        self.info = info
        self.registered = registered
        self.on_registered = on_registered
        self.last_error = ""

    def GetInfo(self, request: rpb.InfoRequest, context: grpc.ServicerContext) -> rpb.PluginInfo:
        return self.info

    def NotifyRegistrationStatus(
        self, request: rpb.RegistrationStatus, context: grpc.ServicerContext
    ) -> rpb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("kubelet registered plugin %s (%s)", self.info.name, self.info.type)
            self.last_error = ""
            self.registered.set()
            if self.on_registered is not None:
                self.on_registered()
        else:
            log.error("kubelet refused plugin %s: %s", self.info.name, request.error)
            self.last_error = request.error
            self.registered.clear()
        return rpb.RegistrationStatusResponse()


class RegistrationServer:
    def __init__(
        self,
        registry_dir: Path,
        plugin_type: str,
        name: str,
        endpoint: Path,
        versions: list[str],
        *,
        on_registered: Callable[[], None] | None = None,
    ) -> None:
        self.socket_path = registry_dir / f"{name}-reg.sock"
        self.registered = threading.Event()
        info = rpb.PluginInfo(
            type=plugin_type, name=name, endpoint=str(endpoint), supported_versions=versions
        )
        self.servicer = _Registration(info, self.registered, on_registered)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        rpb_grpc.add_RegistrationServicer_to_server(self.servicer, self.server)

    def start(self) -> None:
        check_socket_path(self.socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self.server.add_insecure_port(f"unix://{self.socket_path}")
        self.server.start()
        log.info("registration socket %s", self.socket_path)

    def stop(self) -> None:
        self.server.stop(0.5).wait()
        self.socket_path.unlink(missing_ok=True)
