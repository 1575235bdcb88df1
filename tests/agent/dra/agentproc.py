"""The node agent as a real subprocess (``kubeacc agent ...``), for end-to-end and crash tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.node import cdi
from kubeacc.testbed import Testbed


class AgentProcess:
    def __init__(
        self,
        node: str,
        host_root: Path,
        kubeconfig: Path,
        kubelet_root: Path,
        workdir: Path,
    ) -> None:
        self.node = node
        self.host_root = host_root
        self.kubeconfig = kubeconfig
        self.kubelet_root = kubelet_root
        self.cdi_dir = workdir / "cdi"
        self.state_dir = workdir / "state"
        self.log_path = workdir / "agent.log"
        self.pause_file = workdir / "paused"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(
        self,
        pause_at: str | None = None,
        extra: list[str] | None = None,
        wrapper: list[str] | None = None,
        *,
        apply_classes: bool = True,
    ) -> None:
        """Start ``kubeacc agent``; ``wrapper``: a command line that ends by exec'ing its args."""
        env = dict(os.environ)
        env.pop("KUBEACC_AGENT_PAUSE_AT", None)
        if pause_at:
            env["KUBEACC_AGENT_PAUSE_AT"] = pause_at
            env["KUBEACC_AGENT_PAUSE_FILE"] = str(self.pause_file)
        self.pause_file.unlink(missing_ok=True)
        argv = [
            *(wrapper or []),
            str(Path(sys.executable).parent / "kubeacc"),
            "agent",
            f"--node-name={self.node}",
            f"--host-root={self.host_root}",
            f"--kubeconfig={self.kubeconfig}",
            f"--kubelet-root={self.kubelet_root}",
            f"--cdi-dir={self.cdi_dir}",
            f"--state-dir={self.state_dir}",
            "--rediscover-interval=1",
            *(["--apply-classes"] if apply_classes else []),
            *(extra or []),
        ]
        if not any(a.startswith("--driver-user-space") for a in argv):
            # a synthetic host has no NVIDIA driver user space (tests/agent/test_userspace_runtime)
            argv.append("--driver-user-space=toolkit")
        log = self.log_path.open("ab")
        self.starts += 1
        log.write(f"==== start {self.starts}: pause_at={pause_at}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_log(self, text: str, timeout: float = 60, count: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= count:
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"agent log lacks {text!r} after {timeout}s:\n{self.log()[-3000:]}")

    def wait_registered(self, timeout: float = 60) -> None:
        self.wait_log("kubelet registered plugin kubeacc.io", timeout, count=self.starts)

    def wait_paused(self, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pause_file.exists():
                return self.pause_file.read_text()
            time.sleep(0.05)
        raise AssertionError(f"agent never paused:\n{self.log()[-3000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()

    # -- what is on disk ---------------------------------------------------------------------
    def spec_uids(self) -> set[str]:
        return cdi.spec_uids(self.cdi_dir)

    def checkpoint_claims(self) -> dict[str, Any]:
        return read_claims(self.state_dir)

    def stray_files(self) -> list[str]:
        """Temporary files left behind by interrupted atomic writes (after a clean restart)."""
        return [p.name for d in (self.cdi_dir, self.state_dir) for p in d.glob(".*.tmp")]


@contextmanager
def registered_agent(testbed: Testbed, host_root: Path, workdir: Path) -> Iterator[AgentProcess]:
    """``kubeacc agent`` for the testbed's node on ``host_root``, registered with the kubelet;
    stopped on the way out."""
    a = AgentProcess(
        testbed.node_name, host_root, testbed.kubeconfig, testbed.kubelet.root_dir, workdir
    )
    a.start()
    try:
        a.wait_registered()
        yield a
    finally:
        a.stop()


def plan_json(testbed: Testbed, namespace: str) -> subprocess.CompletedProcess[str]:
    """``kubeacc plan -o json`` of ``namespace`` on the testbed, as a user runs it."""
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "kubeacc"),
            "plan",
            f"--kubeconfig={testbed.kubeconfig}",
            f"--namespace={namespace}",
            "-o",
            "json",
        ],
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )
