"""The CUDA smoke check: a container started through the node's container runtime with a CDI
spec of one GPU and the driver's user space, running kube-acc's smoke program
(``kubeacc-cuda-smoke``, kubeacc/native/cudasmoke.c): the driver library found through the
container's ld cache, cuInit, a context, an allocation freed again.

The runtime is containerd, driven by its ``ctr`` client (``ctr run --device <CDI name>``, which
applies CDI specs from ``/etc/cdi`` and ``/var/run/cdi``, the directories the agent's default
``--cdi-dir`` is one of). The spec is written for the run only (``kubeacc-selftest-<id>.json``,
not a name the agent's spec checks read) and removed after it. The image is the admin's: any
image with a C library and ``ldconfig`` (a CUDA base image, a distribution's), already in
containerd's store; the smoke program is bind-mounted into it read-only.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kubeacc.model import Device
from kubeacc.node.cdi import CDI_VERSION, device_node
from kubeacc.node.userspace.nvidia import DriverRootError
from kubeacc.node.userspace.provider import DriverUserSpace
from kubeacc.selftest.report import Check, failed, passed, skipped

#: containerd's default capabilities of a container (``ctr run``'s spec), every one dropped:
#: the smoke programs need none (the CDI hook runs in the runtime's context, not theirs).
DEFAULT_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
#: The image is treated as hostile (docs/security.md): its containers get the runtime's
#: default seccomp profile, which ``ctr`` applies only when asked, and no capabilities.
CONFINED = ("--seccomp", *(a for cap in DEFAULT_CAPS for a in ("--cap-drop", cap)))
#: What the self test keeps of each output stream of a container (its report quotes it).
OUTPUT_MAX = 1 << 20
NAME = "CUDA smoke in a container"
KIND = "kubeacc.io/selftest"
CONTAINER_PROGRAM = "/kubeacc-cuda-smoke"
OK_LINE = "smoke ok"


@dataclass(frozen=True)
class Runtime:
    """How to start a container on this node."""

    #: containerd's client binary.
    ctr: Path
    #: containerd's socket.
    address: Path
    #: The image to run the smoke program in (None: the check is skipped).
    image: str | None
    #: The smoke program, a host path.
    program: Path
    #: Where ``ctr`` reads CDI specs (the spec is written there for the run).
    spec_dir: Path = Path("/var/run/cdi")
    namespace: str = "k8s.io"
    #: Where the device nodes are, a host path (``/`` on a node).
    device_root: Path = Path("/")
    timeout: float = 120.0
    #: Extra environment of the smoke containers (NAME=VALUE).
    env: tuple[str, ...] = ()

    def problem(self) -> str:
        """Why no container can be started with it ("" when one can)."""
        for what, path in (("--ctr", self.ctr), ("--smoke-program", self.program)):
            if not os.access(path, os.X_OK):
                return f"{what} {path} is not an executable file"
        return ""

    def run_args(self) -> list[str]:
        """``ctr run``'s options for what every smoke container gets: confined, with the
        extra environment."""
        return [*CONFINED, *(a for e in self.env for a in ("--env", e))]


def smoke_check(rt: Runtime, us: DriverUserSpace, gpu: Device | None) -> Check:
    if rt.image is None:
        return skipped(NAME, "no --smoke-image given (an image with a C library and ldconfig)")
    if gpu is None:
        return skipped(NAME, "no NVIDIA GPU on this node")
    if problem := rt.problem():
        return failed(NAME, problem)
    try:
        edits = us.nvidia_edits()
    except DriverRootError as exc:
        return failed(NAME, f"no driver user space to hand the container: {exc}")
    name = f"smoke-{os.getpid()}"
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [
            {
                "name": name,
                "containerEdits": {
                    "deviceNodes": [device_node(p, rt.device_root) for p in gpu.device_nodes],
                    "env": [f"NVIDIA_VISIBLE_DEVICES={gpu.uuid or 'all'}"],
                },
            }
        ],
        "containerEdits": edits,
    }
    spec_path = rt.spec_dir / f"kubeacc-selftest-{name}.json"
    container = f"kubeacc-selftest-{name}"
    try:
        rt.spec_dir.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(spec, indent=1))
        done = ctr(
            rt,
            "run",
            "--rm",
            *rt.run_args(),
            "--device",
            f"{KIND}={name}",
            "--mount",
            f"type=bind,src={rt.program},dst={CONTAINER_PROGRAM},options=rbind:ro",
            rt.image,
            container,
            CONTAINER_PROGRAM,
        )
    except subprocess.TimeoutExpired:
        ctr(rt, "task", "kill", "--signal", "SIGKILL", container, check_timeout=False)
        ctr(rt, "containers", "rm", container, check_timeout=False)
        return failed(NAME, f"the container did not end within {rt.timeout:.0f} s")
    except OSError as exc:
        return failed(NAME, f"{spec_path}: {exc.strerror or exc}")
    finally:
        spec_path.unlink(missing_ok=True)
    output = (done.stdout + done.stderr).strip()
    last = output.splitlines()[-1] if output else "no output"
    gpu_name = f"GPU {gpu.pci.bus_id if gpu.pci else gpu.name}"
    if done.returncode == 0 and OK_LINE in done.stdout:
        return passed(NAME, f"{gpu_name}, image {rt.image}: {'; '.join(output.splitlines())}")
    return failed(NAME, f"{gpu_name}, image {rt.image}: exit {done.returncode}: {last}")


def ctr(rt: Runtime, *args: str, check_timeout: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(rt.ctr), f"--address={rt.address}", f"--namespace={rt.namespace}", *args]
    try:
        return bounded_run(argv, rt.timeout)
    except subprocess.TimeoutExpired:
        if check_timeout:
            raise
        return subprocess.CompletedProcess(argv, -1, "", "timed out")


def bounded_run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` for a command that prints what a container prints: the image is
    treated as hostile, so at most :data:`OUTPUT_MAX` bytes of each stream are kept (the rest
    is read and dropped) and bytes that are not UTF-8 are replaced, never an exception.
    TimeoutExpired, with the command killed, after ``timeout`` seconds."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    kept: dict[int, bytes] = {}

    def drain(key: int, stream: IO[bytes]) -> None:
        buf = bytearray()
        while chunk := stream.read(1 << 16):
            buf += chunk[: max(0, OUTPUT_MAX - len(buf))]
        kept[key] = bytes(buf)

    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=drain, args=(i, s), daemon=True)
        for i, s in enumerate((proc.stdout, proc.stderr))
    ]
    for r in readers:
        r.start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for r in readers:
            r.join(5)
        proc.stdout.close()
        proc.stderr.close()

    def text(key: int) -> str:
        raw = kept.get(key, b"").decode(errors="replace")
        return raw.replace("\r\n", "\n").replace("\r", "\n")

    return subprocess.CompletedProcess(argv, proc.returncode, text(0), text(1))
