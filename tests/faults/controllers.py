"""kube-acc's controller in the fault runner: two replicas of ``kubeacc controller`` with leader
election, as the chart runs it (``controller.replicas: 2``), each under a stepped clock of its
own (tests/faults/clock.py; as on two nodes), and a watch on which of them acts.

A replica acts when it runs a reconcile pass (``kubeacc_controller_reconcile_passes_total`` on
its /metrics goes up): only the leader does, and with ``--resync-seconds=1`` it does at least
every second. A standby never does. On a clean hand-over the old leader stops acting 10 s
after its last renewal (two thirds of the Lease's 15 s) and the new one starts no sooner than
15 s after it last saw the Lease change, so two replicas acting within ``OVERLAP`` seconds of
each other are two leaders at once.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

IDENTITIES = ("replica-a", "replica-b")
LEASE_NAMESPACE = "kube-system"
#: Seconds within which two replicas' passes mean two leaders (a clean hand-over leaves ~5 s).
OVERLAP = 2.0
POLL = 0.5
_PASSES = re.compile(r"^kubeacc_controller_reconcile_passes_total (\S+)$", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body) of a GET; (0, why) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(exc)


class ControllerProcess:
    """One ``kubeacc controller`` replica."""

    def __init__(
        self,
        identity: str,
        kubeconfig: Path,
        workdir: Path,
        lease_namespace: str = LEASE_NAMESPACE,
    ) -> None:
        self.identity = identity
        self.lease_namespace = lease_namespace
        self.kubeconfig = kubeconfig
        self.log_path = workdir / f"controller-{identity}.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wrapper: tuple[str, ...] = ()) -> None:
        argv = [
            *wrapper,
            str(Path(sys.executable).parent / "kubeacc"),
            "controller",
            f"--kubeconfig={self.kubeconfig}",
            f"--identity={self.identity}",
            f"--lease-namespace={self.lease_namespace}",
            "--resync-seconds=1",
            f"--metrics-address=127.0.0.1:{self.port}",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def passes(self) -> float | None:
        """Reconcile passes run so far (None: /metrics did not answer)."""
        status, body = http_get(f"http://127.0.0.1:{self.port}/metrics")
        found = _PASSES.search(body) if status == 200 else None
        return float(found.group(1)) if found else None

    def ready(self) -> bool:
        return http_get(f"http://127.0.0.1:{self.port}/readyz")[0] == 200


class Controllers:
    """The replicas and the watch on their passes (a thread, from :meth:`start` to :meth:`stop`)."""

    def __init__(
        self, kubeconfig: Path, workdir: Path, wrappers: dict[str, tuple[str, ...]]
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.replicas = [ControllerProcess(i, kubeconfig, workdir) for i in IDENTITIES]
        self.wrappers = wrappers
        self._lock = threading.Lock()
        self._violations: list[str] = []
        #: identity -> runner-monotonic time of the last poll that saw its passes go up
        self.acted_at: dict[str, float] = {}
        #: identity -> the acting spells seen: [first, last] poll times
        self.spells: dict[str, list[list[float]]] = {i: [] for i in IDENTITIES}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float) -> None:
        for r in self.replicas:
            r.start(self.wrappers.get(r.identity, ()))
        self._thread = threading.Thread(target=self._watch, name="controllers", daemon=True)
        self._thread.start()
        self.wait_ready(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        for r in self.replicas:
            r.stop()

    def take_violations(self) -> list[str]:
        with self._lock:
            out, self._violations = self._violations, []
        return out

    def wait_ready(self, timeout: float) -> float:
        """Both replicas ready (/readyz) and one acting; the seconds it took (AssertionError
        with both logs' tails past ``timeout``)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            now = time.monotonic()
            acting = any(now - t < 3.0 for t in self.acted_at.values())
            if acting and all(r.ready() for r in self.replicas):
                return time.monotonic() - t0
            for r in self.replicas:
                if r.proc is not None and r.proc.poll() is not None:
                    raise AssertionError(
                        f"controller {r.identity} exited {r.proc.returncode}:\n{r.log()[-3000:]}"
                    )
            time.sleep(POLL)
        tails = "\n".join(f"--- {r.identity}\n{r.log()[-1500:]}" for r in self.replicas)
        raise AssertionError(f"no controller leading and both ready after {timeout}s:\n{tails}")

    def _watch(self) -> None:
        last: dict[str, float] = {}
        while not self._stop.wait(POLL):
            now = time.monotonic()
            for r in self.replicas:
                passes = r.passes()
                if passes is None:
                    continue
                before = last.get(r.identity)
                last[r.identity] = passes
                if before is None or passes <= before:
                    continue
                self._acted(r.identity, now)

    def _acted(self, identity: str, now: float) -> None:
        spells = self.spells[identity]
        prev = self.acted_at.get(identity)
        if spells and prev is not None and now - prev <= 3.0:
            spells[-1][1] = now
        else:
            spells.append([now, now])
        self.acted_at[identity] = now
        for other, at in self.acted_at.items():
            if other != identity and now - at < OVERLAP:
                with self._lock:
                    self._violations.append(
                        f"two controllers acting at once: {other} and {identity} ran reconcile "
                        f"passes {now - at:.1f}s apart"
                    )

    def leader(self) -> str:
        """The replica that acted last (the first one before any acted)."""
        if not self.acted_at:
            return IDENTITIES[0]
        return max(self.acted_at, key=lambda i: self.acted_at[i])

    def transitions(self) -> int:
        """Acting spells after the first (hand-overs seen)."""
        return max(0, sum(len(s) for s in self.spells.values()) - 1)
