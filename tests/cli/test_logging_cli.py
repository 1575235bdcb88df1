"""One ``--log-level`` on every long-running command; at info the logs say what the component
did, HTTP request lines only at debug (controller and agent run against the testbed)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lightkube import Client

from kubeacc.crds.resources import AcceleratorOperation, as_dict
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.procs import terminate
from kubeacc.testbed.testbed import Testbed
from tests.cli.clirun import KUBEACC, assert_one_line_error, clean_env, kubeacc
from tests.crdfixtures import create_operation, wait_for

HTTP_LINE = "HTTP Request:"


@pytest.mark.parametrize(
    ("command", "level"),
    [("agent", "debug"), ("lifecycle-agent", "INFO"), ("device-plugin", "Warning")],
)
def test_node_commands_take_log_level(tmp_path: Path, command: str, level: str) -> None:
    node = [] if command == "device-plugin" else ["--node-name", "n"]
    result = kubeacc(command, *node, "--log-level", level, "--host-root", "/nope", home=tmp_path)
    # The flag parsed: the command got as far as checking the host root.
    assert_one_line_error(result, 2, "host root /nope")
    result = kubeacc(command, *node, "--log-level", "loud", home=tmp_path)
    assert_one_line_error(result, 2, "'--log-level'", "'debug', 'info', 'warning', 'error'")
    assert_one_line_error(kubeacc(command, *node, "--verbose", home=tmp_path), 2, "--verbose")


@contextlib.contextmanager
def _process(args: list[str], log: Path, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [KUBEACC, *args], stdout=out, stderr=subprocess.STDOUT, env=clean_env(home)
        )
    try:
        yield proc
    finally:
        terminate(proc)


def _wait_log(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 90) -> str:
    def found() -> str | None:
        assert proc.poll() is None, log.read_text()
        content = log.read_text(errors="replace")
        return content if text in content else None

    return str(wait_for(f"{text!r} in {log.name}", found, timeout=timeout))


def _operation_finished(client: Client, ns: str, name: str) -> Callable[[], str | None]:
    def phase() -> str | None:
        op = as_dict(client.get(AcceleratorOperation, name, namespace=ns))
        p = (op.get("status") or {}).get("phase")
        return str(p) if p in ("Succeeded", "Failed") else None

    return phase


@pytest.mark.cluster
def test_controller_logs_operations_not_http_requests(
    testbed: Testbed, kubeacc_crds: None, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    args = ["controller", "--kubeconfig", str(testbed.kubeconfig), "--lease-namespace", namespace]
    args += ["--identity", f"cli-log-{uuid.uuid4().hex[:5]}", "--interval", "0.3"]
    info = tmp_path / "info.log"
    with _process(args, info, tmp_path) as proc:
        _wait_log(info, "acquired new lease", proc)
        create_operation(
            kube_client, namespace, "reset-ghost", {"action": "Reset", "targets": ["ghost"]}
        )
        assert wait_for("refusal", _operation_finished(kube_client, namespace, "reset-ghost"))
        text = _wait_log(info, f"AcceleratorOperation {namespace}/reset-ghost:", proc)
    assert HTTP_LINE not in text
    line = next(x for x in text.splitlines() if f"{namespace}/reset-ghost:" in x)
    assert "WARNING kubeacc-controller:" in line and "AcceleratorNotFound" in line

    debug = tmp_path / "debug.log"
    with _process([*args, "--log-level", "debug"], debug, tmp_path) as proc:
        create_operation(
            kube_client, namespace, "reset-ghost-2", {"action": "Reset", "targets": ["ghost"]}
        )
        text = _wait_log(debug, f"AcceleratorOperation {namespace}/reset-ghost-2:", proc)
    assert HTTP_LINE in text


@pytest.mark.cluster
def test_agent_logs_what_it_published(testbed: Testbed, tmp_path: Path) -> None:
    host = build("edge-mixed", tmp_path / "host")
    node = f"cli-log-{uuid.uuid4().hex[:5]}"
    args = ["agent", "--node-name", node, "--host-root", str(host), "--no-kubelet-plugin"]
    args += ["--kubeconfig", str(testbed.kubeconfig), "--state-dir", str(tmp_path / "state")]
    args += ["--cdi-dir", str(tmp_path / "cdi"), "--kubelet-root", str(tmp_path / "kubelet")]
    log = tmp_path / "agent.log"
    with _process(args, log, tmp_path) as proc:
        text = _wait_log(log, "published", proc)
        text = _wait_log(log, "agent ready", proc)
    assert HTTP_LINE not in text
    assert "INFO" in text


def test_device_plugin_without_kubelet_socket_warns_and_keeps_going(
    tmp_path: Path,
) -> None:
    host = build("dgx-h100", tmp_path / "host")
    plugin_dir = Path(tempfile.mkdtemp(prefix="kubeacc-dp-"))  # socket paths must be short
    log = tmp_path / "dp.log"
    args = ["device-plugin", "--host-root", str(host), "--plugin-dir", str(plugin_dir)]
    with _process([*args, "--nvml", "off"], log, tmp_path) as proc:
        text = _wait_log(log, "no kubelet socket", proc)
        time.sleep(1)
        assert proc.poll() is None  # still running, waiting for the kubelet
        text = log.read_text()
    warning = next(x for x in text.splitlines() if "no kubelet socket" in x)
    assert "WARNING" in warning and str(plugin_dir / "kubelet.sock") in warning
    assert "retrying" in warning
    assert "registered with the kubelet" not in text
    assert "not registered yet" in text
    shutil.rmtree(plugin_dir)
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    result = kubeacc(*args, "--nvml", "off", "--plugin-dir", str(deep), home=tmp_path)
    assert_one_line_error(result, 1, "socket path longer than", "choose a shorter directory")
