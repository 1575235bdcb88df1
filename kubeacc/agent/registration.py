"""Kubelet plugin registration (pluginregistration.v1): a socket in ``plugins_registry``.

The kubelet's plugin watcher notices the socket, calls GetInfo, validates the answer, connects
to the advertised endpoint and reports the outcome with NotifyRegistrationStatus. Removing the
socket deregisters the plugin. Shared by every kubelet plugin the agent runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from grpclib.server import Stream

from kubeacc.node.kubeletapi import pluginregistration_v1_grpc as rpb_grpc
from kubeacc.node.kubeletapi import pluginregistration_v1_pb2 as rpb
from kubeacc.node.rpc import UnixServer, received

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"


class _Registration(rpb_grpc.RegistrationBase):
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

    async def GetInfo(self, stream: Stream[rpb.InfoRequest, rpb.PluginInfo]) -> None:
        await received(stream)
        await stream.send_message(self.info)

    async def NotifyRegistrationStatus(
        self, stream: Stream[rpb.RegistrationStatus, rpb.RegistrationStatusResponse]
    ) -> None:
        request = await received(stream)
        await asyncio.to_thread(self.record, request)
        await stream.send_message(rpb.RegistrationStatusResponse())

    def record(self, request: rpb.RegistrationStatus) -> None:
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
        self.server = UnixServer([self.servicer], self.socket_path)

    def start(self) -> None:
        self.server.start()
        log.info("registration socket %s", self.socket_path)

    def stop(self) -> None:
        self.server.stop(0.5)
