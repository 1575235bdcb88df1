"""The DRAResourceHealth stream: the board now, again after each change, ends with the plugin."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import grpc

from kubeacc.agent.dra.health import HealthBoard
from kubeacc.agent.dra.plugin import ResourceHealth
from kubeacc.model import HealthState
from kubeacc.node.kubeletapi import drahealth_v1alpha1_pb2 as hpb
from kubeacc.node.rpc import UnixServer
from tests.kubeletclient import drahealth_v1alpha1_pb2_grpc as hpb_grpc


def _states(msg: hpb.NodeWatchResourcesResponse) -> dict[str, int]:
    return {d.device.device_name: d.health for d in msg.devices}


def test_stream_follows_the_board_and_ends_when_it_closes() -> None:
    board = HealthBoard("node-a")
    board.update({"gpu-0": (HealthState.HEALTHY, ""), "gpu-1": (HealthState.HEALTHY, "")})
    with tempfile.TemporaryDirectory(prefix="health-", dir="/tmp") as d:
        server = UnixServer([ResourceHealth(board)], Path(d) / "dra.sock", mode=0o600)
        server.start()
        assert (Path(d) / "dra.sock").stat().st_mode & 0o777 == 0o600
        try:
            with grpc.insecure_channel(f"unix://{d}/dra.sock") as ch:
                stream = hpb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                    hpb.NodeWatchResourcesRequest(), timeout=10
                )
                first = next(stream)
                assert _states(first) == {"gpu-0": hpb.HEALTHY, "gpu-1": hpb.HEALTHY}
                assert {d.device.pool_name for d in first.devices} == {"node-a"}
                # the same board again is no news; a change from another thread is
                board.update(
                    {"gpu-0": (HealthState.HEALTHY, ""), "gpu-1": (HealthState.HEALTHY, "")}
                )
                threading.Thread(
                    target=board.update,
                    args=(
                        {
                            "gpu-0": (HealthState.HEALTHY, ""),
                            "gpu-1": (HealthState.UNHEALTHY, "XID 79"),
                        },
                    ),
                ).start()
                second = next(stream)
                assert _states(second) == {"gpu-0": hpb.HEALTHY, "gpu-1": hpb.UNHEALTHY}
                assert [d.message for d in second.devices] == ["", "XID 79"]
                board.close()
                assert list(stream) == []  # the stream ends cleanly (status OK)
                assert stream.code() == grpc.StatusCode.OK
        finally:
            server.stop()
