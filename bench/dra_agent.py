"""A node agent to benchmark over its DRA socket: control plane, claim, ``kubeacc agent``.

Set-up shared by the DRA benchmarks: a testbed control plane (real kube-apiserver; no kubelet
is needed), a Node object, a ResourceClaim whose status is allocated one device of the node's
pool (written through the status subresource, as the scheduler would), and ``kubeacc agent``
as a subprocess on a synthetic 8-GPU server. The benchmarks then play the kubelet on the
plugin's unix socket.
"""

from __future__ import annotations

import compileall
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

import kubeacc
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import free_port

NODE = "bench-node"
DEVICE = "gpu-0000-1b-00-0"
NAMESPACE = "bench"
CLAIM = "bench"


@dataclass
class BenchAgent:
    proc: subprocess.Popen[bytes]
    socket: Path
    claim_uid: str
    #: The claim's name (in :data:`NAMESPACE`).
    claim: str = CLAIM
    #: The testbed's API server (kubeconfig) and a client of it, for a benchmark's own objects.
    kubeconfig: Path | None = None
    client: Any = None
    #: The benchmark's scratch directory.
    work: Path | None = None
    #: Processes of the testbed's control plane (etcd, kube-apiserver, ...), for their CPU.
    control_plane: tuple[int, ...] = ()

    def prepare_request(self) -> v1.NodePrepareResourcesRequest:
        return v1.NodePrepareResourcesRequest(claims=[self._claim()])

    def unprepare_request(self) -> v1.NodeUnprepareResourcesRequest:
        return v1.NodeUnprepareResourcesRequest(claims=[self._claim()])

    def _claim(self) -> v1.Claim:
        return v1.Claim(namespace=NAMESPACE, name=self.claim, uid=self.claim_uid)


def proc_status(pid: int) -> dict[str, float]:
    """RSS (MB), threads and open file descriptors of a process."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
        elif line.startswith("Threads:"):
            out["threads"] = int(line.split()[1])
    out["fds"] = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    return out


@dataclass(frozen=True)
class Share:
    """Allocate the claim a share of a memory-shared GPU instead of the whole GPU."""

    memory: str
    cores: str
    share_id: str


def allocated_claim(
    client: Any,
    share: Share | None = None,
    config: dict[str, Any] | None = None,
    device: str = DEVICE,
    name: str = CLAIM,
    driver: str = "kubeacc.io",
) -> str:
    """Create the claim ``name`` allocated ``device`` of ``driver``'s pool of the node, as the
    scheduler would; its UID."""
    request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": "gpu.kubeacc.io"}}
    result: dict[str, Any] = {
        "request": "gpu",
        "driver": driver,
        "pool": NODE,
        "device": device,
    }
    if share is not None:
        capacity = {"kubeacc.io/memory": share.memory, "kubeacc.io/cores": share.cores}
        request["exactly"]["capacity"] = {"requests": capacity}
        result |= {"shareID": share.share_id, "consumedCapacity": capacity}
    client.create(
        from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"devices": {"requests": [request]}},
            }
        )
    )
    devices: dict[str, Any] = {"results": [result]}
    if config is not None:  # the claim's opaque config, as the scheduler copies it
        devices["config"] = [
            {"source": "FromClaim", "opaque": {"driver": "kubeacc.io", "parameters": config}}
        ]
    status = {"allocation": {"devices": devices}}
    client.patch(
        ResourceClaim.Status,
        name,
        {"status": status},
        namespace=NAMESPACE,
        patch_type=PatchType.MERGE,
    )
    return str(client.get(ResourceClaim, name, namespace=NAMESPACE).metadata.uid)


def compile_package() -> None:
    """Byte-compile the kubeacc package, as installing it does.

    A checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (this machine's environment) has no
    ``.pyc`` files, so the agent would compile each of its ~100 modules from source at every
    start; the compiler's scratch memory stays behind as ~1.5 MB of fragmented heap, which an
    installed agent (pip writes the bytecode) does not carry. See docs/dra.md "Memory".
    """
    compileall.compile_dir(Path(kubeacc.__file__).parent, quiet=1)


@contextmanager
def bench_agent(
    share: Share | None = None,
    args: Sequence[str] = (),
    config: dict[str, Any] | None = None,
    host_dir: list[Path] | None = None,
    profile: str = "dgx-h100",
    device: str = DEVICE,
) -> Iterator[BenchAgent]:
    """The agent, serving its DRA socket; stopped (SIGTERM) on exit.

    ``share``: the claim holds a share of the GPU; ``args``: more ``kubeacc agent`` options;
    ``config``: the claim's opaque config (``GpuConfig``...); ``host_dir``: gets the synthetic
    host root and the agent's state directory appended; ``profile``: the synthetic host;
    ``device``: the one the claim is allocated.
    """
    with (
        tempfile.TemporaryDirectory(prefix="kubeacc-bench-") as tmp,
        Testbed.start(with_kubelet=False) as tb,
    ):
        work = Path(tmp)
        client = tb.client()
        client.create(Node(metadata=ObjectMeta(name=NODE)))
        client.create(Namespace(metadata=ObjectMeta(name=NAMESPACE)))
        uid = allocated_claim(client, share, config, device)
        host = profiles.build(profile, work / "host")
        if host_dir is not None:
            host_dir.extend([host, work / "state"])
        kubelet_root = work / "kubelet"
        compile_package()
        toolkit = ["--driver-user-space=toolkit"]
        log = (work / "agent.log").open("wb")
        agent = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "kubeacc"),
                "agent",
                f"--node-name={NODE}",
                f"--host-root={host}",
                f"--kubeconfig={tb.kubeconfig}",
                f"--kubelet-root={kubelet_root}",
                f"--cdi-dir={work / 'cdi'}",
                f"--state-dir={work / 'state'}",
                f"--metrics-address=127.0.0.1:{free_port()}",  # as the Helm chart runs it
                *args,
                # a synthetic host has no NVIDIA driver user space for the CDI specs to carry
                *([] if any(a.startswith("--driver-user-space") for a in args) else toolkit),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sock = kubelet_root / "plugins" / "kubeacc.io" / "dra.sock"
        try:
            deadline = time.monotonic() + 30
            while not sock.exists():
                if time.monotonic() > deadline or agent.poll() is not None:
                    raise RuntimeError((work / "agent.log").read_text())
                time.sleep(0.05)
            control_plane = tuple(p.pid for p in tb.control_plane.processes() if p.pid)
            yield BenchAgent(
                agent,
                sock,
                uid,
                kubeconfig=tb.kubeconfig,
                client=client,
                work=work,
                control_plane=control_plane,
            )
        finally:
            agent.terminate()
            agent.wait(15)
            log.close()
