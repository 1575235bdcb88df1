"""kube-acc installed on a real-runtime testbed node, as an admin installs it: by its Helm chart.

The steps ``python -m kubeacc.testbed up --with-kubeacc`` and the real-runtime chart tests share:

* the node's containerd gets the kube-acc image (kubeacc.testbed.kubeacc_image) and the
  examples' ``busybox:1.36`` under the name a node that pulled it would have (there is no
  registry), both imported rather than pulled (``image.pullPolicy: Never``);
* a synthetic host (a ``kubeacc.synthetic.profiles`` profile) whose ``/dev`` entries are real
  character devices (mknod, the numbers of ``/dev/null``), so the CDI device nodes the agent
  hands out open in a container; the agent sees it as ``agent.hostRoot``;
* the NVML stand-in: the synthetic host's description (``/.synthetic``) mounted where the
  agent's ``--host-root`` looks for it (``nvidia.nvml: auto``), so GPU memory and MIG are known
  as a driver would report them; ``nvml=False`` installs without it (NVML not found);
* the node-local bitstream library (``bitstreams.hostPath``) holding the synthetic library;
* every device type published in the ResourceSlices, the NICs' SR-IOV VFs included
  (``agent.draPublish``, :data:`DRA_PUBLISH`), so every example has what it asks for;
* ``helm install`` of charts/kubeacc with those values, then the agent and controller pods
  waited for until every container is ready.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from kubeacc.discovery import discover
from kubeacc.synthetic import profiles
from kubeacc.synthetic.bitstreams import write_library
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed.helm import ensure_helm
from kubeacc.testbed.images import busybox_layer, write_image
from kubeacc.testbed.kubeacc_image import KUBEACC_IMAGE, ensure_image
from kubeacc.testbed.kubelet import Kubelet, make_device_nodes
from kubeacc.testbed.testbed import Testbed

CHART = Path(__file__).resolve().parents[2] / "charts" / "kubeacc"
NAMESPACE = "kubeacc-system"
RELEASE = "kubeacc"
DEFAULT_PROFILE = "dgx-h100"
#: ``agent.draPublish``: every device type and the NICs' SR-IOV VFs (the chart's default, [],
#: leaves the VFs out), so examples/claims/sriov-vf.yaml has a VF to get.
DRA_PUBLISH = ["gpu", "fpga", "nic", "xpu", "accelerator", "vf"]
#: The examples' image, as the kubelet asks containerd for ``busybox:1.36``.
EXAMPLES_IMAGE = "docker.io/library/busybox:1.36"


class InstallError(RuntimeError):
    """A step of the install failed; the message says which and why."""


def import_images(node: Kubelet, scratch: Path, out: TextIO = sys.stderr) -> None:
    """The kube-acc image and the examples' busybox into ``node``'s containerd."""
    if node.containerd is None:
        raise InstallError(
            f"node {node.node_name} runs the fake runtime: kube-acc needs containerd"
        )
    node.containerd.import_image(ensure_image(out=out))
    scratch.mkdir(parents=True, exist_ok=True)
    busybox = write_image(EXAMPLES_IMAGE, ["sh"], busybox_layer(), scratch / "busybox.tar")
    node.containerd.import_image(busybox)


def synthetic_host(profile: str, dest: Path) -> Path:
    """Profile ``profile`` written under ``dest``, its device nodes real character devices."""
    if profile not in profiles.PROFILES:
        known = ", ".join(sorted(profiles.PROFILES))
        raise InstallError(f"unknown host profile {profile!r}; known: {known}")
    host = profiles.build(profile, dest)
    nodes = sorted({n for d in discover(SyntheticHost(host)).devices for n in d.device_nodes})
    make_device_nodes(host, nodes)
    return host


def chart_values(node: Kubelet, host: Path, state: Path, *, nvml: bool = True) -> dict[str, Any]:
    """The chart's values for ``node`` with the synthetic ``host`` (see :func:`values_for`)."""
    return values_for(host, state, kubelet_root=node.root_dir, cdi_dir=node.cdi_dir, nvml=nvml)


def values_for(
    host: Path, state: Path, *, kubelet_root: Path, cdi_dir: Path, nvml: bool = True
) -> dict[str, Any]:
    """The chart's values for a node whose kubelet root and CDI directory are those given.

    ``state``: a directory for the agent's state (``state/``) and the bitstream library
    (``bitstreams/``, filled with the synthetic library)."""
    repository, tag = KUBEACC_IMAGE.rsplit(":", 1)
    bitstreams = state / "bitstreams"
    write_library(bitstreams)
    agent: dict[str, Any] = {
        "hostRoot": str(host),
        "kubeletRoot": str(kubelet_root),
        "cdiDir": str(cdi_dir),
        "stateDir": str(state / "state"),
        "rediscoverInterval": 2,
        "draPublish": DRA_PUBLISH,
    }
    if nvml:
        agent["extraVolumes"] = [
            {"name": "synthetic", "hostPath": {"path": str(host / ".synthetic")}}
        ]
        agent["extraVolumeMounts"] = [{"name": "synthetic", "mountPath": "/host/.synthetic"}]
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "agent": agent,
        "bitstreams": {"hostPath": str(bitstreams)},
        # the synthetic host has no driver: NVML is the stand-in above or nothing
        "nvidia": {"nvml": "auto" if nvml else "off", "driverUserSpace": "toolkit"},
        "controller": {"replicas": 1},
    }


@dataclass
class Helm:
    """helm against one cluster; a failed command raises with its output unless ``check=False``."""

    binary: Path
    kubeconfig: Path | None = None
    timeout: float = 300

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), *args]
        if self.kubeconfig is not None:
            argv.append(f"--kubeconfig={self.kubeconfig}")
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=self.timeout, check=False
        )
        if check and done.returncode != 0:
            raise InstallError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done


def pod_with_prefix(client: Client, prefix: str, namespace: str = NAMESPACE) -> Pod | None:
    return next(
        (
            p
            for p in client.list(Pod, namespace=namespace)
            if p.metadata and p.metadata.name and p.metadata.name.startswith(prefix)
        ),
        None,
    )


def ready_pod(client: Client, prefix: str, namespace: str = NAMESPACE) -> Pod | None:
    """The pod named ``prefix...`` whose every container is running and ready (None until)."""
    pod = pod_with_prefix(client, prefix, namespace)
    statuses = (pod.status.containerStatuses if pod and pod.status else None) or []
    if statuses and all(s.ready and s.state and s.state.running for s in statuses):
        return pod
    return None


def wait_ready(
    client: Client, prefix: str, timeout: float = 180, namespace: str = NAMESPACE
) -> Pod:
    """Wait for :func:`ready_pod`; a time-out names the pod's last status."""
    deadline = time.monotonic() + timeout
    while True:
        pod = ready_pod(client, prefix, namespace)
        if pod is not None:
            return pod
        if time.monotonic() > deadline:
            last = pod_with_prefix(client, prefix, namespace)
            raise InstallError(
                f"timed out after {timeout:.0f}s waiting for the {prefix} pod to be ready; "
                f"its status: {last.status if last else 'no such pod'}"
            )
        time.sleep(0.5)


@dataclass
class Installed:
    """kube-acc as :func:`install` left it: the release, its values and the synthetic host."""

    testbed: Testbed
    helm: Helm
    host: Path
    values_file: Path
    values: dict[str, Any] = field(default_factory=dict)
    namespace: str = NAMESPACE
    release: str = RELEASE

    def upgrade(self, values: dict[str, Any]) -> None:
        """``helm upgrade`` the release to ``values`` (written to :attr:`values_file`)."""
        self.values_file.write_text(yaml.safe_dump(values))
        self.values = values
        self.helm(
            "upgrade", self.release, str(CHART), "-n", self.namespace, "-f", str(self.values_file)
        )

    def shell_env(self) -> str:
        """The lines an admin's shell sources: KUBECONFIG, and the testbed's kubectl, helm and
        this Python's ``kubeacc`` first on PATH."""
        tb = self.testbed
        path = f"{tb.bin_dir}:{self.helm.binary.parent}:{Path(sys.executable).parent}"
        return f"export KUBECONFIG={tb.kubeconfig}\nexport PATH={path}:$PATH\n"


def install(
    tb: Testbed,
    workdir: Path,
    *,
    profile: str = DEFAULT_PROFILE,
    nvml: bool = True,
    images: bool = True,
    wait: bool = True,
    out: TextIO = sys.stderr,
) -> Installed:
    """The synthetic host built under ``workdir``, the images imported (unless ``images`` is
    false: done before by :func:`import_images`, for several installs on one node), the values
    written, ``helm install``; with ``wait`` the agent and controller ready."""
    if len(tb.kubelets) != 1:
        raise InstallError("kube-acc on the testbed takes one node (its synthetic host)")
    workdir.mkdir(parents=True, exist_ok=True)
    node = tb.kubelet
    host = synthetic_host(profile, workdir / "host")
    if images:
        import_images(node, workdir / "images", out)
    values_file = workdir / "values.yaml"
    done = Installed(tb, Helm(ensure_helm(out=out), tb.kubeconfig), host, values_file)
    done.values = chart_values(node, host, workdir, nvml=nvml)
    values_file.write_text(yaml.safe_dump(done.values))
    done.helm(
        "install",
        done.release,
        str(CHART),
        "-n",
        done.namespace,
        "--create-namespace",
        "-f",
        str(done.values_file),
    )
    if wait:
        client = tb.client()
        wait_ready(client, "kubeacc-agent-")
        wait_ready(client, "kubeacc-controller-")
    return done
