"""The Go peers of the benchmarks (kubeacc.testbed.peers): pinned, built, and they start.

The start test builds both programs (cached in ``~/.cache/kubeacc/peers-*``) and checks what the
benchmarks rely on: the sample device plugin registers at the kubelet's fixed socket path once
that path is bound to a directory of ours in a mount namespace, and answers Allocate for its
devices; the DRA test driver, given a kubeconfig and directories, answers the kubelet's
``GetInfo`` on its registration socket as a DRA plugin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as dpb
from kubeacc.node.kubeletapi import pluginregistration_v1_pb2 as rpb
from kubeacc.testbed import peers
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.versions import LANES
from tests.kubeletclient import deviceplugin_v1beta1_pb2_grpc as dpg
from tests.kubeletclient import pluginregistration_v1_pb2_grpc as rpg

DP_DIR = "/var/lib/kubelet/device-plugins"


def test_module_pins_the_main_lanes_release_and_names_both_peers() -> None:
    src = peers.source_dir()
    text = (src / "go.mod").read_text()
    assert LANES["1.37"].version == peers.RELEASE
    assert f"\nrequire k8s.io/kubernetes {peers.RELEASE}\n" in text
    tools = text[text.index("\ntool (") :]
    for package in peers.PEERS.values():
        assert f"\t{package}\n" in tools, package
    assert "k8s.io/kubelet => k8s.io/kubelet v0.37.2" in text  # staging modules replaced
    assert (src / "go.sum").is_file()


def test_cache_directory_follows_the_module_files(tmp_path: Path) -> None:
    src = tmp_path / "peers"
    shutil.copytree(peers.source_dir(), src)
    before = peers.peers_dir(src)
    assert before.name.startswith(f"peers-{peers.RELEASE}-")
    assert peers.peers_dir(src) == before  # stable
    (src / "go.mod").write_text((src / "go.mod").read_text() + "\n// changed\n")
    assert peers.peers_dir(src) != before


class _Registration:
    """The kubelet's device-plugin Registration service: remembers the request."""

    def __init__(self, plugin_dir: Path) -> None:
        self.got: list[dpb.RegisterRequest] = []
        self.arrived = threading.Event()
        outer = self

        class Servicer(dpg.RegistrationServicer):  # type: ignore[misc]
            def Register(self, request: dpb.RegisterRequest, context: object) -> dpb.Empty:
                outer.got.append(request)
                outer.arrived.set()
                return dpb.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        dpg.add_RegistrationServicer_to_server(Servicer(), self.server)
        self.server.add_insecure_port(f"unix://{plugin_dir / 'kubelet.sock'}")
        self.server.start()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.cluster
def test_peers_build_and_start(testbed: Testbed, tmp_path: Path) -> None:
    built = peers.ensure_built()
    assert peers.ensure_built() == built  # cached
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}

    plugin_dir = tmp_path / "dp"
    plugin_dir.mkdir()
    kubelet = _Registration(plugin_dir)
    script = f'mkdir -p {DP_DIR} && mount --bind "$0" {DP_DIR} && exec "$1"'
    namespace = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    sample = subprocess.Popen(
        [*namespace, str(plugin_dir), str(built / "sample-device-plugin")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert kubelet.arrived.wait(30), "the sample device plugin never registered"
        [request] = kubelet.got
        assert request.resource_name == "example.com/resource"
        with grpc.insecure_channel(f"unix://{plugin_dir / request.endpoint}") as channel:
            answer = dpg.DevicePluginStub(channel).Allocate(
                dpb.AllocateRequest(
                    container_requests=[dpb.ContainerAllocateRequest(devices_ids=["Dev-1"])]
                ),
                timeout=10,
            )
        assert [m.container_path for m in answer.container_responses[0].mounts] == ["/tmp/Dev-1"]
    finally:
        _stop(sample)
        kubelet.server.stop(0)

    # unix socket paths are short (108 bytes): not under pytest's long tmp_path
    short = Path(tempfile.mkdtemp(prefix="peers-"))
    root = short / "kubelet"
    (root / "plugins" / "test-driver.cdi.k8s.io").mkdir(parents=True)
    (root / "plugins_registry").mkdir()
    log = (tmp_path / "driver.log").open("wb")
    driver = subprocess.Popen(
        [
            str(built / "test-driver"),
            f"--kubeconfig={testbed.kubeconfig}",
            "kubelet-plugin",
            f"--node-name={testbed.node_names[0]}",
            f"--plugin-registration-path={root / 'plugins_registry'}",
            f"--datadir={root / 'plugins'}",
            f"--cdi-dir={short / 'cdi'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    sock = root / "plugins_registry" / "test-driver.cdi.k8s.io-reg.sock"
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "no registration socket"
            time.sleep(0.05)
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            info = rpg.RegistrationStub(channel).GetInfo(rpb.InfoRequest(), timeout=10)
        assert (info.type, info.name) == ("DRAPlugin", "test-driver.cdi.k8s.io")
        assert info.endpoint == str(root / "plugins" / "test-driver.cdi.k8s.io" / "dra.sock")
    finally:
        _stop(driver)
        log.close()
        shutil.rmtree(short, ignore_errors=True)
