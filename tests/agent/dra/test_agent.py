"""The agent without an API server: it still serves the kubelet and retries publishing."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from kubeacc.agent.compose import compose_agent
from kubeacc.agent.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from kubeacc.agent.options import options_from
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1
from kubeacc.node.kubeletapi import pluginregistration_v1_pb2 as rpb
from kubeacc.node.userspace.provider import UserSpaceMode
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from tests.kubeletclient import dra_v1_pb2_grpc as v1_grpc
from tests.kubeletclient import pluginregistration_v1_pb2_grpc as rpb_grpc

UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def test_serves_the_kubelet_while_the_api_server_is_away(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE)
    state = tmp_path / "state"
    state.mkdir()
    # a claim prepared before the restart
    cp = Checkpoint(state)
    cp.load()
    cp.record_prepare(
        {"u1": PreparedClaim("ns", "c", [PreparedDevice(["r"], "n1", "gpu-x", ["id"])], {})}
    )
    cp.close()
    host = SyntheticHost(profiles.build("edge-mixed", tmp_path / "host"))
    opts = options_from(
        node_name="n1",
        kubeconfig=kubeconfig,
        kubelet_root=Path(tempfile.mkdtemp(prefix="kubelet-", dir="/tmp")),  # sun_path ≤ 107
        cdi_dir=tmp_path / "cdi",
        state_dir=state,
        rediscover_interval=0.2,
        driver_user_space=UserSpaceMode.TOOLKIT,
    )
    agent = compose_agent(host, opts)
    caplog.set_level(logging.WARNING)
    agent.start()
    try:
        # the spec of the checkpointed claim was rebuilt at start
        assert (tmp_path / "cdi" / "kubeacc.io-claim_u1.json").exists()
        reg = opts.node.registry_dir / f"{DRIVER_NAME}-reg.sock"
        with grpc.insecure_channel(f"unix://{reg}") as ch:
            info = rpb_grpc.RegistrationStub(ch).GetInfo(rpb.InfoRequest(), timeout=5)
        assert info.type == "DRAPlugin"
        assert info.name == DRIVER_NAME
        assert info.endpoint == str(opts.node.dra_socket)
        assert list(info.supported_versions) == [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ]
        with grpc.insecure_channel(f"unix://{opts.node.dra_socket}") as ch:
            stub = v1_grpc.DRAPluginStub(ch)
            claim = v1.Claim(namespace="ns", name="c", uid="u1")
            resp = stub.NodeUnprepareResources(
                v1.NodeUnprepareResourcesRequest(claims=[claim]), timeout=5
            )
            assert resp.claims["u1"].error == ""
            other = v1.Claim(namespace="ns", name="d", uid="u2")
            prep = stub.NodePrepareResources(
                v1.NodePrepareResourcesRequest(claims=[other]), timeout=30
            )
            assert "prepare failed" in prep.claims["u2"].error
        assert not (tmp_path / "cdi" / "kubeacc.io-claim_u1.json").exists()
        # nor set aside: the unprepare finished removing it (cdi.set_aside, cdi.discard)
        assert not [p.name for p in (tmp_path / "cdi").iterdir() if "u1" in p.name]
        deadline = time.monotonic() + 10
        while "publishing failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "publishing failed" in caplog.text
        assert not agent.published.is_set()
    finally:
        agent.stop()
    assert not opts.node.dra_socket.exists()
    assert not (opts.node.registry_dir / f"{DRIVER_NAME}-reg.sock").exists()
    shutil.rmtree(opts.node.kubelet_root)
