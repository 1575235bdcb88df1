"""A client of the kubelet's pod-resources API (``v1.PodResourcesLister``).

The kubelet serves it on ``<kubelet-root>/pod-resources/kubelet.sock``; ``List`` names, per pod
and container, the device-plugin device IDs the kubelet handed out. The node agent reads it to
learn who holds the devices it advertises through the device plugin API.
"""

from __future__ import annotations

from pathlib import Path

from grpclib.client import Channel

from kubeacc.node.kubeletapi import podresources_v1_grpc as pr_grpc
from kubeacc.node.kubeletapi import podresources_v1_pb2 as pr
from kubeacc.node.rpc import rpc_loop

#: Relative to the kubelet's root directory.
SOCKET = Path("pod-resources") / "kubelet.sock"


class PodResourcesClient:
    def __init__(self, socket: Path, timeout: float = 5.0) -> None:
        self.socket = socket
        self.timeout = timeout

    def list(self) -> list[pr.PodResources]:
        """Every pod the kubelet admitted, with its containers' devices (``OSError`` etc. when
        the kubelet cannot be reached)."""

        async def call() -> pr.ListPodResourcesResponse:
            channel = Channel(path=str(self.socket))
            try:
                stub = pr_grpc.PodResourcesListerStub(channel)
                return await stub.List(pr.ListPodResourcesRequest(), timeout=self.timeout)
            finally:
                channel.close()

        return list(rpc_loop().run(call(), timeout=self.timeout + 1).pod_resources)
