"""The life-cycle agent (``kubeacc lifecycle-agent``) of each node of a fault run, as a real
process, and the ``lifecycle-kill`` fault.

Each node runs one, with the node agent's certificate (the DaemonSet runs both containers under
one identity, deploy/rbac/agent.yaml), on the node's synthetic host with the synthetic kernel
(``--simulate-kernel``: resets, PCI removes and partial reconfigurations have their effects and
are recorded on the host, kubeacc/synthetic/kernel.py) and the node's bitstream library. It keeps
no files: what it has started is in the AcceleratorOperations' ``status.results`` (a Running
result written before the action), so a node reboot or power loss has nothing of its own to drop.

``lifecycle-kill``: an operation is made to run on the node first when one can be (the runner's
hook), then at a seeded instant within :data:`KILL_WITHIN_S` the agent is SIGKILLed, started
again at once, and the recovery is timed until its ``/readyz`` answers 200.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kubeacc.testbed.procs import terminate
from tests.faults.controllers import free_port, http_get

LIFECYCLE_KILL = "lifecycle-kill"
#: the kill falls this long (uniform, seeded) after the operation was created
KILL_WITHIN_S = 2.0


class LifecycleProcess:
    """One node's ``kubeacc lifecycle-agent``."""

    def __init__(
        self, node: str, host: Path, kubeconfig: Path, bitstreams: Path, workdir: Path
    ) -> None:
        self.node = node
        self.host = host
        self.kubeconfig = kubeconfig
        self.bitstreams = bitstreams
        self.log_path = workdir / "lifecycle-agent.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        #: every process id it ran as (the host's action record names the process)
        self.pids: set[int] = set()
        self.kills = 0
        #: called before a kill: makes an operation run on this node (set by the runner)
        self.busy: Callable[[], None] | None = None

    def start(self) -> None:
        self.bitstreams.mkdir(parents=True, exist_ok=True)
        argv = [
            str(Path(sys.executable).parent / "kubeacc"),
            "lifecycle-agent",
            f"--node-name={self.node}",
            f"--host-root={self.host}",
            f"--kubeconfig={self.kubeconfig}",
            f"--bitstream-dir={self.bitstreams}",
            "--simulate-kernel",
            "--interval=1",
            f"--metrics-address=127.0.0.1:{self.port}",
        ]
        with self.log_path.open("ab") as log:
            log.write(f"==== start {len(self.pids) + 1}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.pids.add(self.proc.pid)

    def ready(self) -> bool:
        return http_get(f"http://127.0.0.1:{self.port}/readyz")[0] == 200

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready():
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"lifecycle agent exited {self.proc.returncode}: {self.tail()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"lifecycle agent not ready after {timeout}s: {self.tail()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            terminate(self.proc)

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""


def kill_fault(agent: LifecycleProcess, timeout: float) -> float:
    """``lifecycle-kill``: an operation made to run, the agent SIGKILLed at a seeded instant
    within :data:`KILL_WITHIN_S`, started again; the seconds until it is ready."""
    if agent.busy is not None:
        agent.busy()
    time.sleep(random.Random(f"{agent.node}/{agent.kills}").uniform(0.0, KILL_WITHIN_S))
    agent.kills += 1
    agent.kill()
    t0 = time.monotonic()
    agent.start()
    agent.wait_ready(timeout)
    return time.monotonic() - t0
