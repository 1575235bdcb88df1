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
from tests.cli.clirun import ended
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
    if not ended(proc, 30):
        raise AssertionError(
            f"still running 30 s after SIGTERM:\n{log.read_text(errors='replace')[-2000:]}"
        )
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


#: A program that stops on signals the daemons' way; ``{setup}`` is what its main thread does
#: before it waits for the stop (with ``lock`` and ``stop_on_signals`` at hand).
_PROGRAM = """
import signal, sys, threading, time
from kubeacc.cli.signals import stop_on_signals
lock = threading.Lock()
def on_stop():
    with lock:  # what a stop may need: a lock the main thread can be holding
        print("on_stop ran", flush=True)
stop = stop_on_signals(on_stop, grace={grace})
{setup}
with lock:
    print("ready", flush=True)
    stop.wait()
    time.sleep({hold})
time.sleep(30)  # a stop that never finishes: only the watchdog or a second signal ends it
"""


def _program(setup: str = "", grace: float = 20, hold: float = 0) -> subprocess.Popen[str]:
    code = _PROGRAM.format(setup=setup, grace=grace, hold=hold)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n", proc.communicate(timeout=30)
    return proc


def _ended(proc: subprocess.Popen[str], within: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {within} s on: {proc.communicate()}") from None


def test_a_second_signal_exits_at_once_while_the_stop_waits() -> None:
    proc = _program(hold=5)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # two pending signals reach a process lowest number first
    proc.send_signal(signal.SIGINT)
    out, err = _ended(proc, ENDS_WITHIN)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "second signal SIGINT; exiting now" in err
    # The second signal came while the main thread held the lock: on_stop had to wait.
    assert "on_stop ran" not in out


def test_on_stop_runs_once_the_lock_is_free_and_the_watchdog_ends_the_rest() -> None:
    """The stop does not run inside the main thread's signal handler: there, a lock the main
    thread holds (an event's own, the stderr buffer's) would deadlock it until the watchdog."""
    proc = _program(grace=2, hold=0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = _ended(proc, 2 + ENDS_WITHIN)
    assert out == "on_stop ran\n"
    assert proc.returncode == 128 + signal.SIGTERM
    assert err == "kubeacc: still running 2 s after SIGTERM; exiting now\n"


def test_a_signal_the_kernel_gives_another_thread_still_stops_the_command() -> None:
    """With SIGTERM blocked in the main thread, the kernel hands it to another thread; the
    main thread, asleep in its wait, never learns of it by itself."""
    proc = _program(setup="signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})", grace=2)
    proc.send_signal(signal.SIGTERM)
    out, err = _ended(proc, 2 + ENDS_WITHIN)
    assert out == "on_stop ran\n"
    assert "still running 2 s after SIGTERM" in err
