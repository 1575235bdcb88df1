"""Child processes of the testbed: started with their output in a log file, stopped for sure.

Every process gets its own session (so a signal reaches only it) and, on Linux, a parent-death
signal, so a testbed whose Python process is killed outright does not leave orphans behind.
An ``atexit`` hook stops whatever is still running when the interpreter exits.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_live: set[Process] = set()
_live_lock = threading.Lock()
_ports_given: set[int] = set()


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 not handed out before by this process."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _ports_given:
            _ports_given.add(port)
            return port
    raise RuntimeError("no free port on 127.0.0.1")


class ProcessExited(RuntimeError):
    """A component exited while the testbed expected it to run."""


class Process:
    """One component process with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.cwd is None:
            # Never the caller's working directory: a kubelet that removes a container deletes
            # ``<its log path>*``, and the fake CRI reports an empty log path, so the glob was
            # ``*`` in the kubelet's working directory (every file of the directory the tests
            # ran from). An empty folder of the process's own takes that.
            slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in self.name)
            self.cwd = self.log_path.parent / ".cwd" / slug
            self.cwd.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"=== {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (only calls prctl)
            )
        with _live_lock:
            _live.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def check(self) -> None:
        """Raise with the log tail when the process is no longer running."""
        if self._popen is None:
            raise ProcessExited(f"{self.name} was never started")
        rc = self._popen.poll()
        if rc is not None:
            raise ProcessExited(
                f"{self.name} exited with {rc}; log {self.log_path}:\n{self.tail()}"
            )

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit status."""
        p = self._popen
        if p is None:
            return None
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
            except ProcessLookupError:
                pass
        with _live_lock:
            _live.discard(self)
        return p.returncode

    def kill(self) -> None:
        p = self._popen
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(10)
        with _live_lock:
            _live.discard(self)


def wait_for(
    what: str,
    probe: Callable[[], bool],
    timeout: float,
    watch: Sequence[Process] = (),
    interval: float = 0.1,
) -> None:
    """Poll ``probe`` until it is true; fail early when a watched process exits."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in watch:
            proc.check()
        try:
            if probe():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log_path}):\n{p.tail(20)}" for p in watch)
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(interval)


def terminate(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM to a child started with :class:`subprocess.Popen`, SIGKILL after ``grace``
    seconds; returns once it is reaped."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_all() -> None:
    """Stop every process still running (the atexit hook)."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        try:
            p.stop(timeout=5)
        except Exception:
            p.kill()


atexit.register(stop_all)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (0 when it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` has used so far (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
