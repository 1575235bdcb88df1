"""SIGTERM ends every long-running ``kubeacc`` command within a few seconds, whatever it is
doing: here each one is stuck on a peer that accepts connections and never answers (an API
server, a kubelet), the worst case for a clean stop. ``kubeacc discover`` answers a host with a
FIFO where a sysfs attribute should be."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.cli.signals import GRACE
from kubeacc.synthetic import profiles
from tests.hosts import HostFactory

KUBEACC = str(Path(sys.executable).parent / "kubeacc")
#: The grace period plus what a loaded 2-core machine adds.
ENDS_WITHIN = GRACE + 3


@pytest.fixture
def hung_api(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose server completes TCP connections and then says nothing."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # never accepted: the kernel completes the handshakes
    port = listener.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "hung",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "hung", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    yield kubeconfig
    listener.close()


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    try:
        return subprocess.Popen([KUBEACC, *args], stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


def _wait_for(proc: subprocess.Popen[bytes], ready: Path | str, log: Path) -> None:
    """Until ``ready`` (a path that appears, or a log line) says the command is at work."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if isinstance(ready, Path) and ready.exists():
            break
        if isinstance(ready, str) and ready in log.read_text(errors="replace"):
            break
        assert proc.poll() is None, log.read_text(errors="replace")
        time.sleep(0.1)
    else:
        raise AssertionError(f"never ready:\n{log.read_text(errors='replace')[-2000:]}")
    time.sleep(1)  # well into its work


def _terminate_timed(proc: subprocess.Popen[bytes], log: Path) -> float:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"still running 30 s after SIGTERM:\n{log.read_text(errors='replace')[-2000:]}"
        ) from None
    took = time.monotonic() - started
    assert took < ENDS_WITHIN, f"took {took:.1f} s:\n{log.read_text(errors='replace')[-2000:]}"
    return took


def test_agent_ends_on_sigterm_with_its_api_server_hung(hosts: HostFactory, hung_api: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="sig-", dir="/tmp") as tmp:  # sun_path
        work = Path(tmp)
        log = work / "log"
        proc = _start(
            [
                "agent",
                "--node-name=n1",
                f"--host-root={hosts.pristine('dgx-h100')}",
                f"--kubeconfig={hung_api}",
                f"--kubelet-root={work / 'kubelet'}",
                f"--cdi-dir={work / 'cdi'}",
                f"--state-dir={work / 'state'}",
                "--device-plugin-type=gpu",
                f"--device-plugin-dir={work / 'dp'}",
            ],
            log,
        )
        _wait_for(proc, work / "kubelet/plugins/kubeacc.io/dra.sock", log)
        _terminate_timed(proc, log)


def test_device_plugin_ends_on_sigterm_while_registering_with_a_hung_kubelet(
    hosts: HostFactory,
) -> None:
    with tempfile.TemporaryDirectory(prefix="sig-", dir="/tmp") as tmp:
        work = Path(tmp)
        kubelet = socket.socket(socket.AF_UNIX)
        kubelet.bind(str(work / "kubelet.sock"))
        kubelet.listen(64)  # never accepted, never answered
        log = work / "log"
        proc = _start(
            [
                "device-plugin",
                f"--host-root={hosts.pristine('dgx-h100')}",
                f"--plugin-dir={work}",
                "--type=gpu",
            ],
            log,
        )
        try:
            _wait_for(proc, work / "kubeacc-gpu.sock", log)
            _terminate_timed(proc, log)
        finally:
            kubelet.close()


def test_controller_ends_on_sigterm_with_its_api_server_hung(
    hung_api: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    proc = _start(["controller", f"--kubeconfig={hung_api}", "--identity=c1"], log)
    _wait_for(proc, "starting", log)
    _terminate_timed(proc, log)


def test_lifecycle_agent_ends_on_sigterm_with_its_api_server_hung(
    hosts: HostFactory, hung_api: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    proc = _start(
        [
            "lifecycle-agent",
            "--node-name=n1",
            f"--host-root={hosts.pristine('dgx-h100')}",
            f"--kubeconfig={hung_api}",
            f"--bitstream-dir={tmp_path}",
        ],
        log,
    )
    _wait_for(proc, "life-cycle agent for node n1", log)
    _terminate_timed(proc, log)


def test_discover_answers_with_a_warning_when_sysfs_holds_a_fifo(tmp_path: Path) -> None:
    root = profiles.build("dgx-h100", tmp_path / "host")
    gpu = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:1b:00.0"))
    (gpu / "numa_node").unlink()
    os.mkfifo(gpu / "numa_node")
    done = subprocess.run(
        [KUBEACC, "discover", f"--host-root={root}", "-o", "json"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    inventory = json.loads(done.stdout)
    assert len(inventory["devices"]) == 16
    assert any(
        w["message"] == "not a regular file (a FIFO)" and w["path"].endswith("/numa_node")
        for w in inventory["warnings"]
    )
