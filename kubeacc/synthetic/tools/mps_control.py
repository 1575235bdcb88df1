"""Synthetic ``nvidia-cuda-mps-control``: the MPS control daemon and its client.

Used as the real one is: ``nvidia-cuda-mps-control -d`` starts a daemon for the GPUs in
``CUDA_VISIBLE_DEVICES``, with its pipes in ``CUDA_MPS_PIPE_DIRECTORY`` and its log in
``CUDA_MPS_LOG_DIRECTORY``, and returns once it runs; ``echo quit | nvidia-cuda-mps-control``
(same pipe directory) tells it to stop and returns once it has. The daemon is a real detached
process: as the real one (driver 580), a unix socket ``control``, a ``control_lock`` and a pid
file ``nvidia-cuda-mps-control.pid`` in the pipe directory, a ``control.log`` in the log
directory; ``quit`` removes the pid file. Its start and its stop are appended to the
host's call record (:mod:`.hoststate`). A daemon whose host root disappears (a test's temporary
directory) stops by itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import sys
import time
from pathlib import Path

from kubeacc.synthetic.tools import hoststate

PID_FILE = "nvidia-cuda-mps-control.pid"
CONTROL = "control"


def _dirs() -> tuple[Path, Path]:
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    log = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
    return pipe, log


def running_pid(pipe: Path) -> int | None:
    """The daemon's pid when its pid file names a live process."""
    try:
        pid = int((pipe / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:  # a zombie (killed, not reaped) does not run
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return pid
    return None if stat.rpartition(")")[2].split()[:1] == ["Z"] else pid


def main(argv: list[str]) -> int:
    root = hoststate.root_of_tool(argv[0])
    pipe, log = _dirs()
    if argv[1:] == ["-d"]:
        return _start(root, pipe, log)
    if argv[1:]:
        print(f"synthetic nvidia-cuda-mps-control: unknown arguments {argv[1:]}", file=sys.stderr)
        return 2
    return _client(pipe)


def _start(root: Path, pipe: Path, log: Path) -> int:
    if running_pid(pipe) is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    pipe.mkdir(parents=True, exist_ok=True)
    log.mkdir(parents=True, exist_ok=True)
    (pipe / PID_FILE).unlink(missing_ok=True)
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        try:
            _daemon(root, pipe, log)
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if running_pid(pipe) is not None:
            return 0
        time.sleep(0.01)
    print("MPS control daemon did not start", file=sys.stderr)
    return 1


def _daemon(root: Path, pipe: Path, log: Path) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    control = pipe / CONTROL
    control.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(control))
    server.listen(8)
    (pipe / "control_lock").touch()
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    _log(log, f"Starting control daemon using socket {control}")
    hoststate.record(root, "mps", "start", gpus, [str(pipe), os.getpid()], "ok")
    tmp = pipe / (PID_FILE + ".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, pipe / PID_FILE)
    while True:
        ready, _, _ = select.select([server], [], [], 1.0)
        if not (root / ".synthetic").is_dir():
            break  # the host is gone: nobody will ever ask us to quit
        if not ready:
            continue
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            data = b""
            with contextlib.suppress(OSError):
                while chunk := conn.recv(4096):
                    data += chunk
        commands = [c.strip() for c in data.decode(errors="replace").splitlines() if c.strip()]
        for command in commands:
            _log(log, f"Cmd:{command}")
        if "quit" in commands:
            hoststate.record(root, "mps", "stop", gpus, [str(pipe), os.getpid()], "ok")
            _log(log, "Exit with status 0")
            break
    server.close()
    with contextlib.suppress(OSError):
        (pipe / PID_FILE).unlink()


def _log(log: Path, line: str) -> None:
    with open(log / "control.log", "a") as out:
        out.write(f"[{time.time():.3f} Control {os.getpid()}] {line}\n")


def _client(pipe: Path) -> int:
    pid = running_pid(pipe)
    if pid is None:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    commands = sys.stdin.read()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(pipe / CONTROL))
        conn.sendall(commands.encode() if commands.endswith("\n") else (commands + "\n").encode())
    if "quit" in commands.split():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if running_pid(pipe) != pid:
                return 0
            time.sleep(0.01)
        print("MPS control daemon did not quit", file=sys.stderr)
        return 1
    return 0
