"""The DRAResourceHealth stream: the board now, again after each change, ends with the plugin;
the same in both API versions served (v1, v1alpha1)."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from kubeacc.agent.dra.health import HealthBoard
from kubeacc.agent.dra.plugin import ResourceHealthV1, ResourceHealthV1alpha1
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.model import HealthState
from kubeacc.node.kubeletapi import drahealth_v1_pb2 as hpb
from kubeacc.node.kubeletapi import drahealth_v1alpha1_pb2 as hpb_alpha
from kubeacc.node.rpc import UnixServer
from tests.kubeletclient import drahealth_v1_pb2_grpc as hpb_grpc
from tests.kubeletclient import drahealth_v1alpha1_pb2_grpc as hpb_alpha_grpc

#: (version, servicer, messages, the kubelet's stub module)
VERSIONS = [
    ("v1", ResourceHealthV1, hpb, hpb_grpc),
    ("v1alpha1", ResourceHealthV1alpha1, hpb_alpha, hpb_alpha_grpc),
]


def _states(msg: Any) -> dict[str, int]:
    return {d.device.device_name: d.health for d in msg.devices}


@pytest.mark.parametrize(("version", "servicer", "pb", "pb_grpc"), VERSIONS, ids=["v1", "v1alpha1"])
def test_stream_follows_the_board_and_ends_when_it_closes(
    version: str, servicer: Any, pb: ModuleType, pb_grpc: ModuleType
) -> None:
    board = HealthBoard("node-a")
    board.update({"gpu-0": (HealthState.HEALTHY, ""), "gpu-1": (HealthState.HEALTHY, "")})
    metrics = AgentMetrics(CollectorRegistry())
    with tempfile.TemporaryDirectory(prefix="health-", dir="/tmp") as d:
        server = UnixServer([servicer(board, metrics)], Path(d) / "dra.sock", mode=0o600)
        server.start()
        assert (Path(d) / "dra.sock").stat().st_mode & 0o777 == 0o600
        try:
            with grpc.insecure_channel(f"unix://{d}/dra.sock") as ch:
                stream = pb_grpc.DRAResourceHealthStub(ch).NodeWatchResources(
                    pb.NodeWatchResourcesRequest(), timeout=10
                )
                first = next(stream)
                assert isinstance(first, pb.NodeWatchResourcesResponse)
                assert _states(first) == {"gpu-0": pb.HEALTHY, "gpu-1": pb.HEALTHY}
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
                assert _states(second) == {"gpu-0": pb.HEALTHY, "gpu-1": pb.UNHEALTHY}
                assert [d.message for d in second.devices] == ["", "XID 79"]
                board.close()
                assert list(stream) == []  # the stream ends cleanly (status OK)
                assert stream.code() == grpc.StatusCode.OK
            # the stream was counted under its version, and only there
            counted = {
                v: metrics.registry.get_sample_value(
                    "kubeacc_agent_health_streams_total", {"version": v}
                )
                for v in ("v1", "v1alpha1")
            }
            assert counted == {v: (1.0 if v == version else None) for v in counted}
        finally:
            server.stop()


def test_an_unchanged_board_is_sent_again_so_the_kubelet_keeps_it_fresh() -> None:
    """The kubelet calls a device Unknown once it has not heard of it for its timeout (30 s by
    default), so an unchanged board must still be sent again; a change still goes at once."""
    board = HealthBoard("node-a")
    board.update({"gpu-0": (HealthState.HEALTHY, "")})

    async def first(n: int) -> list[hpb.NodeWatchResourcesResponse]:
        out = []
        async for msg in board.watch(every=0.05):
            out.append(msg)
            if len(out) == n:
                break
        return out

    sent = asyncio.run(asyncio.wait_for(first(3), 10))
    assert [_states(m) for m in sent] == [{"gpu-0": hpb.HEALTHY}] * 3
    # the unchanged board keeps its last-change time: only its sending is repeated
    assert len({m.devices[0].last_updated_time for m in sent}) == 1

    async def after_change() -> hpb.NodeWatchResourcesResponse:
        stream = board.watch(every=3600)
        await anext(stream)
        board.update({"gpu-0": (HealthState.UNHEALTHY, "XID 79")})
        return await anext(stream)

    changed = asyncio.run(asyncio.wait_for(after_change(), 10))
    assert _states(changed) == {"gpu-0": hpb.UNHEALTHY}
