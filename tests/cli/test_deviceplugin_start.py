"""What ``kubeacc device-plugin`` does before the kubelet's Register call (issue 30, item 1).

Without ``--metrics-address`` no one could read its series, so it keeps none: prometheus_client
and the probe server are not imported at all (``tests/cli/test_entry_imports.py`` holds it to
that). With it, the series and the probes are there before the plugin registers, as before:
``/metrics`` counts the registrations, ``/readyz`` answers whether the kubelet accepted every
resource. Its start runs with the cyclic collector off; the start-up freeze turns it on.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kubeacc.gcfreeze import freeze_startup
from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from kubeacc.testbed.procs import free_port
from tests.cli.clirun import ended
from tests.hosts import HostFactory
from tests.kubeletclient import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from tests.testbed.helpers import eventually


class _Kubelet(pb_grpc.RegistrationServicer):  # type: ignore[misc]
    """The kubelet's Registration service (grpcio, not the plugin's grpclib)."""

    def __init__(self) -> None:
        self.registered: list[str] = []
        self.lock = threading.Lock()

    def Register(self, request: pb.RegisterRequest, context: object) -> pb.Empty:
        with self.lock:
            self.registered.append(request.resource_name)
        return pb.Empty()


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[_Kubelet]:
    servicer = _Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{tmp_path / 'kubelet.sock'}")
    server.start()
    yield servicer
    server.stop(0)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def test_with_metrics_address_the_series_and_probes_are_served(
    kubelet: _Kubelet, hosts: HostFactory, tmp_path: Path
) -> None:
    host = hosts.pristine("dgx-h100")
    port = free_port()
    log = tmp_path / "plugin.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubeacc.cli",
                "device-plugin",
                f"--host-root={host}",
                f"--plugin-dir={tmp_path}",
                "--type=gpu",
                f"--metrics-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        registered = 'kubeacc_agent_kubelet_registrations_total{plugin="kubeacc.io/gpu"} 1.0'

        def counted() -> str | None:
            body = _get(f"http://127.0.0.1:{port}/metrics")[1]
            return body if registered in body else None

        body = eventually(counted, 60, "the registration counted in /metrics")
        assert "kubeacc_deviceplugin_allocations_total" in body
        assert kubelet.registered == ["kubeacc.io/gpu"]
        assert _get(f"http://127.0.0.1:{port}/readyz") == (200, "ok\n")
        eventually(lambda: "start-up objects frozen" in log.read_text(), 60, "start-up freeze")
    finally:
        proc.terminate()
        assert ended(proc, 15, dump=True), log.read_text()


def test_the_start_up_freeze_turns_the_collector_on() -> None:
    enabled = gc.isenabled()
    gc.disable()
    try:
        freeze_startup("test")
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        if not enabled:
            gc.disable()
