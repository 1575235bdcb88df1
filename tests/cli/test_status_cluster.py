"""``kubeacc status`` on the real testbed: every check passes with a healthy kube-acc (controller,
agent and extender running as the ``kubeacc`` script), and the command fails, naming the check
and its fix, when the extender is unreachable, NVML is missing, the agent is down, the
controller is gone, or the API server has the DRA gates off."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.core_v1 import Event

from kubeacc.synthetic import profiles
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.versions import FEATURE_GATES
from tests.agent.dra.agentproc import AgentProcess
from tests.cli.clirun import kubeacc
from tests.kubeaccproc import kubeacc_process
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(tb: Testbed, home: Path, *args: str) -> tuple[int, dict[tuple[str, str], Any]]:
    """Exit code and the checks of ``kubeacc status -o json``, by (check, scope[/detail])."""
    done = kubeacc(
        "status", "--kubeconfig", str(tb.kubeconfig), "-o", "json", *args, home=home, timeout=90
    )
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] == (done.returncode == 0), (done.returncode, doc)
    checks = {}
    for c in doc["checks"]:
        key = c["check"] if c["check"] != "crd" else "crd " + c["detail"].split(":")[0]
        checks[(key, c["scope"])] = c
    return done.returncode, checks


def _wait_log(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, path.read_text()[-2000:]
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not logged: {path.read_text()[-2000:]}")


def test_status_passes_when_healthy_and_fails_on_each_broken_part(
    testbed: Testbed, kubeacc_crds: None, namespace: str, tmp_path: Path
) -> None:
    node, home = testbed.node_name, tmp_path / "home"
    home.mkdir()
    host = profiles.build("l4-pair", tmp_path / "host")
    probe = _port()
    ctl_args = ["controller", "--kubeconfig", str(testbed.kubeconfig)]
    ctl_args += ["--lease-namespace", namespace, "--identity", "status-test", "--interval", "1"]
    ext_args = ["extender", "--kubeconfig", str(testbed.kubeconfig), "--insecure-http"]
    ext_args += ["--address", f"127.0.0.1:{_port()}", "--probe-address", f"127.0.0.1:{probe}"]
    ext_args += ["--no-leader-elect"]
    extender_url = f"http://127.0.0.1:{probe}"
    args = ("-n", namespace, "--node", node, "--extender", extender_url)
    agent = AgentProcess(node, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path)
    ctl_log = tmp_path / "controller.log"
    with kubeacc_process(ctl_args, ctl_log) as ctl:
        _wait_log(ctl_log, "acquired new lease", ctl)
        agent.start()
        try:
            agent.wait_registered()
            with kubeacc_process(ext_args, tmp_path / "extender.log"):

                def healthy() -> dict[tuple[str, str], Any] | None:
                    code, checks = _status(testbed, home, *args)
                    return checks if code == 0 else None

                checks = eventually(healthy, 90, "status passing", agent.log)
                for name in ("api-server", "resource.k8s.io/v1", "dra-gates", "controller"):
                    assert checks[(name, "cluster")]["result"] == "pass", checks
                assert checks[("extender", "cluster")]["result"] == "pass"
                for crd in ("accelerators", "acceleratorpolicies", "acceleratoroperations"):
                    assert checks[(f"crd {crd}.kubeacc.io", "cluster")]["result"] == "pass"
                # agents outside the chart: no Pod to judge, what they publish is checked
                assert checks[("agent", node)]["result"] == "skip"
                assert checks[("devices", node)]["detail"].startswith("2 devices")
                assert "memory" in checks[("driver", node)]["detail"]
            # extender stopped: unreachable
            code, checks = _status(testbed, home, *args)
            assert code == 1 and checks[("extender", "cluster")]["result"] == "fail"
            assert "extender" in checks[("extender", "cluster")]["fix"]
            table = kubeacc(
                "status", "--kubeconfig", str(testbed.kubeconfig), *args, home=home, timeout=90
            )
            assert table.returncode == 1 and "To fix:" in table.stdout, table.stdout
            assert "\u2502" not in table.stdout  # piped: plain columns

            # the agent without NVML: GPU memory unknown
            agent.stop()
            agent.start(extra=["--nvml", "off", "--memory-shared", "model=*L4*"])
            agent.wait_registered()
            # ...and the memory-shared selector over those GPUs says why they stay whole
            client = testbed.client(field_manager="kubeacc-test")

            def unknown_memory_event() -> str | None:
                for e in client.list(Event, namespace="default"):
                    if e.reason == "MemorySharedUnknownMemory" and e.involvedObject.name == node:
                        return e.message
                return None

            said = eventually(unknown_memory_event, 60, "MemorySharedUnknownMemory", agent.log)
            assert "model=*L4* selects 2 devices whose memory is unknown" in said

            def nvml_missing() -> dict[str, Any] | None:
                code, checks = _status(testbed, home, "-n", namespace, "--node", node)
                got = checks.get(("nvml", node))
                return got if code == 1 and got else None

            got = eventually(nvml_missing, 60, "nvml check failing", agent.log)
            assert "NVML not found" in got["detail"] and "nvidia.driverRoot" in got["fix"]
        finally:
            agent.stop()

        # the agent down: the kubelet drops its slices, nothing is published for the node
        def agent_down() -> dict[str, Any] | None:
            code, checks = _status(testbed, home, "-n", namespace, "--node", node)
            got = checks[("devices", node)]
            return got if code == 1 and got["result"] == "fail" else None

        got = eventually(agent_down, 120, "devices check failing")
        assert "not registered with the kubelet" in got["fix"]
    # the controller gone: its Lease released or expiring
    code, checks = _status(testbed, home, "-n", namespace)
    assert code == 1 and checks[("controller", "cluster")]["result"] == "fail"


@pytest.fixture(scope="module")
def gates_off() -> Iterator[Testbed]:
    off = ("DRAConsumableCapacity", "DRADeviceTaints", "DRAPartitionableDevices")
    # DRADeviceTaintRules depends on DRADeviceTaints: 1.37's API server (where it is GA and on)
    # refuses to start with it on and DRADeviceTaints off.
    gates = {**FEATURE_GATES, **dict.fromkeys((*off, "DRADeviceTaintRules"), False)}
    tb = Testbed.start(nodes=[KubeletOptions(node_name="gates-off")], feature_gates=gates)
    try:
        yield tb
    finally:
        tb.stop()


def test_status_fails_with_the_dra_gates_off(gates_off: Testbed, tmp_path: Path) -> None:
    code, checks = _status(gates_off, tmp_path, "--node", "gates-off")
    assert code == 1
    gate = checks[("dra-gates", "cluster")]
    assert gate["result"] == "fail", gate
    for name in ("DRAConsumableCapacity", "DRADeviceTaints", "DRAPartitionableDevices"):
        assert name in gate["detail"] and f"{name}=true" in gate["fix"]
    assert checks[("api-server", "cluster")]["result"] == "pass"
