"""The CUDA MPS control daemon of one GPU, run through the host's ``nvidia-cuda-mps-control``.

One daemon per GPU, with its own pipe and log directory under the agent's state directory
(``<state-dir>/mps/<bus-id>/pipe`` and ``.../log``, host paths the CDI spec can mount). It is
started as NVIDIA documents: ``nvidia-cuda-mps-control -d`` with ``CUDA_VISIBLE_DEVICES=<uuid>``,
``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY`` set, and stopped with ``quit`` on the
control tool's standard input. Whether it runs is read from the pid file the daemon keeps in its
pipe directory (``nvidia-cuda-mps-control.pid``), so a restarted agent finds the daemons its
predecessor started.

A container of a claim that uses MPS gets the pipe directory mounted at MPS's default place,
``/tmp/nvidia-mps``, and ``CUDA_MPS_PIPE_DIRECTORY`` pointing there. The mount is writable, so
whatever is in the pipe directory may be a container's (docs/security.md, "Node-side threat
model"): the pid file is read without following a link, opening anything but a regular file or
reading more than a line, and a daemon starts in an emptied directory, so that nothing a
container left there (a link to a host file where the daemon makes its files) is used by the
daemon, which runs as root.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from kubeacc.host import Host
from kubeacc.host.tools import ToolError
from kubeacc.model.accelerator import is_bdf

TOOL = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
#: Where a container finds the pipes (MPS clients look there when the variable is unset, too).
CONTAINER_PIPE_DIR = "/tmp/nvidia-mps"
ENV_PIPE = "CUDA_MPS_PIPE_DIRECTORY"
#: More than any pid file holds (a pid and a newline).
PID_FILE_MAX = 32


class MpsError(Exception):
    """The daemon could not be started or stopped (the message says why)."""


def alive(pid: int) -> bool:
    """A process that runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def read_pid_file(path: Path) -> int | None:
    """The pid in ``path``, or None. The file is in a directory containers write to: a link
    is not followed, nothing but a regular file is opened (a FIFO would block the agent, a
    device node of a container's ``mknod`` would be opened by root: ``/dev/watchdog`` arms a
    reboot), and a file longer than :data:`PID_FILE_MAX` bytes holds no pid (``/dev/zero``
    behind a link would never end)."""
    try:
        where = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(where).st_mode):
            return None
        fd = os.open(f"/proc/self/fd/{where}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
        try:
            data = os.read(fd, PID_FILE_MAX + 1)
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(where)
    if len(data) > PID_FILE_MAX:
        return None
    try:
        pid = int(data.strip())
    except ValueError:
        return None
    return pid if pid > 0 else None


def empty(directory: Path) -> None:
    """Remove everything in ``directory`` without following a link (``shutil.rmtree`` walks
    by descriptor); the directory itself stays (containers may mount it)."""
    with os.scandir(directory) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        path = directory / name
        if is_dir:
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except IsADirectoryError:  # replaced by a directory since the scan
                shutil.rmtree(path, ignore_errors=True)


def is_mps_control(pid: int) -> bool:
    """The process runs ``nvidia-cuda-mps-control`` (its command line names the tool)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return TOOL.encode() in cmdline


class MpsDaemons:
    """Start, stop and find the MPS control daemons of this node's GPUs."""

    def __init__(self, host: Host, base: Path) -> None:
        self.host = host
        self.base = base

    def gpu_dir(self, bus_id: str) -> Path:
        """``base/<bus id>``; a name that is not a bus id (``../x``) would leave ``base``."""
        if not is_bdf(bus_id):
            raise MpsError(f"{bus_id[:80]!r} is not a PCI bus id: no MPS daemon for it")
        return self.base / bus_id

    def pipe_dir(self, bus_id: str) -> Path:
        return self.gpu_dir(bus_id) / "pipe"

    def log_dir(self, bus_id: str) -> Path:
        return self.gpu_dir(bus_id) / "log"

    def pid(self, bus_id: str) -> int | None:
        """The pid of the GPU's daemon when it runs.

        The pid file outlives the daemon when the agent's container restarts (the daemon ends
        with the container, the state dir is the host's): the pid then may name another
        process of the new container, so it counts only when that process is an MPS control
        daemon."""
        try:
            pid = read_pid_file(self.pipe_dir(bus_id) / PID_FILE)
        except MpsError:
            return None
        return pid if pid is not None and alive(pid) and is_mps_control(pid) else None

    def running(self) -> dict[str, int]:
        """Bus id -> pid of every daemon that runs under ``base``."""
        out: dict[str, int] = {}
        if self.base.is_dir():
            for entry in sorted(self.base.iterdir()):
                pid = self.pid(entry.name)
                if pid is not None:
                    out[entry.name] = pid
        return out

    def _run(self, what: str, bus_id: str, uuid: str, args: list[str], stdin: str) -> None:
        env = {
            "CUDA_VISIBLE_DEVICES": uuid,
            ENV_PIPE: str(self.pipe_dir(bus_id)),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir(bus_id)),
        }
        try:
            self.host.tools.run(TOOL, args, env=env, stdin=stdin)
        except ToolError as exc:
            raise MpsError(f"GPU {bus_id}: {what} the MPS control daemon: {exc}") from None

    def start(self, bus_id: str, uuid: str) -> int:
        """Start the GPU's daemon unless it runs; its pid. It starts in an emptied pipe
        directory: what a container of an earlier claim left there is gone."""
        pid = self.pid(bus_id)
        if pid is not None:
            return pid
        try:
            self.pipe_dir(bus_id).mkdir(parents=True, exist_ok=True)
            empty(self.pipe_dir(bus_id))
            self.log_dir(bus_id).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MpsError(f"GPU {bus_id}: the MPS pipe directory: {exc}") from None
        self._run("starting", bus_id, uuid, ["-d"], "")
        pid = self.pid(bus_id)
        if pid is None:
            raise MpsError(f"GPU {bus_id}: the MPS control daemon exited right after its start")
        return pid

    def stop(self, bus_id: str, uuid: str) -> bool:
        """Stop the GPU's daemon if it runs; True if it ran."""
        if self.pid(bus_id) is None:
            return False
        self._run("stopping", bus_id, uuid, [], "quit\n")
        return True
