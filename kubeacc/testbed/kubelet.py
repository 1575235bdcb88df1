"""A real kubelet joined to the testbed cluster, on the upstream in-memory CRI runtime or on a
real one (containerd + runc, ``KubeletOptions(runtime="containerd")``, see
kubeacc.testbed.runtime).

Layout under ``<workdir>/kubelet`` (the kubelet's ``--root-dir``)::

    config.yaml             KubeletConfiguration
    device-plugins/         device plugin dir (kubelet.sock lives here, see below)
    plugins_registry/       plugin registration dir (DRA plugins register here)
    plugins/                conventional home of DRA plugin sockets
    pki/                    the kubelet's own certificates
    pod-logs/               container logs (real runtime: what the containers printed)

With the real runtime the node directory also has ``containerd/`` (the runtime's own files),
``cdi/`` (the CDI spec directory containerd reads; agents under test write there) and
``devices/`` (a device root: real device nodes the tests create, see :meth:`Kubelet.mknod`).

On the real runtime the kubelet runs in the node's network namespace (kubeacc.testbed.nodenet:
its API and healthz listen on the node's address, it reaches the API server through the
``kubernetes`` Service's ClusterIP, kubeacc.testbed.apiproxy) and in the node's mount
namespace, which containerd shares (kubeacc.testbed.mountns), so the volumes it mounts are the
ones containerd hands to containers.

The kubelet hard-codes its device-plugin socket as ``/var/lib/kubelet/device-plugins/kubelet.sock``
whatever ``--root-dir`` says. So that several testbeds can coexist and nothing touches the host's
real directory, the kubelet runs in a private mount namespace in which
``<root>/device-plugins`` is bind-mounted over ``/var/lib/kubelet/device-plugins``; device
plugins (outside that namespace) use ``<root>/device-plugins`` and reach the same sockets.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from kubeacc.testbed.apiproxy import READY as APIPROXY_READY
from kubeacc.testbed.certs import CertificateAuthority, CertPair
from kubeacc.testbed.control_plane import SERVICE_IP
from kubeacc.testbed.kubeconfig import http_ok, write_kubeconfig
from kubeacc.testbed.mountns import MountNamespace
from kubeacc.testbed.procs import Process, free_port, wait_for
from kubeacc.testbed.records import ContainerRecord, read_records
from kubeacc.testbed.runtime import Containerd
from kubeacc.testbed.versions import FEATURE_GATES

#: Where the kubelet looks for device plugins, independent of --root-dir (pluginapi.KubeletSocket).
HOST_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")

_NAMESPACE_WRAPPER = (
    'set -e; mkdir -p "$KUBEACC_HOST_DP_DIR"; '
    'mount --bind "$KUBEACC_DP_DIR" "$KUBEACC_HOST_DP_DIR"; exec "$@"'
)


@dataclass
class KubeletOptions:
    """What a test may choose about the kubelet; everything else is fixed by the testbed."""

    node_name: str = "node-a"
    #: Labels the kubelet registers its Node with (``--node-labels``); the NodeRestriction
    #: admission plugin refuses ``kubernetes.io``/``k8s.io`` keys other than the allowed ones.
    labels: dict[str, str] = field(default_factory=dict)
    topology_manager_policy: str = "none"  # none | best-effort | restricted | single-numa-node
    topology_manager_scope: str = "container"  # container | pod
    cpu_manager_policy: str = "none"  # none | static
    memory_manager_policy: str = "None"  # None | Static
    #: CPUs kept for the system (the static CPU manager needs some), e.g. "0".
    reserved_system_cpus: str | None = None
    max_pods: int = 110
    #: Merged last into the generated KubeletConfiguration (top-level keys replace).
    extra_config: dict[str, Any] = field(default_factory=dict)
    feature_gates: dict[str, bool] = field(default_factory=lambda: dict(FEATURE_GATES))
    #: Run the kubelet in a private mount namespace (see the module doc). Off: the kubelet uses
    #: the host's /var/lib/kubelet/device-plugins directly.
    private_device_plugin_dir: bool = True
    verbosity: int = 2
    #: ``fake``: the upstream in-memory CRI (records every CreateContainer, runs nothing);
    #: ``containerd``: containerd + runc, containers really run (see kubeacc.testbed.runtime).
    runtime: Literal["fake", "containerd"] = "fake"


class Kubelet:
    """The fake CRI runtime plus a kubelet, both managed as child processes."""

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path,
        server: str,
        ca: CertificateAuthority,
        options: KubeletOptions | None = None,
        runtime_bin_dir: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.server = server
        self.ca = ca
        self.options = options or KubeletOptions()
        self.root_dir = workdir / "kubelet"
        self.cri_dir = workdir / "cri"
        self.logs = workdir / "logs"
        self.cri: Process | None = None
        self.containerd: Containerd | None = None
        self.mount_ns: MountNamespace | None = None
        #: The ``kubernetes`` Service inside the node (real runtime only).
        self.apiproxy: Process | None = None
        if self.options.runtime == "containerd":
            if runtime_bin_dir is None:
                raise ValueError("the containerd runtime needs its binaries (runtime_bin_dir)")
            self.mount_ns = MountNamespace(
                workdir / "ns" / "mnt",
                {HOST_DEVICE_PLUGIN_DIR: self.root_dir / "device-plugins"},
            )
            self.containerd = Containerd(
                workdir,
                runtime_bin_dir,
                [self.cdi_dir],
                self.logs,
                f"containerd {self.node_name}",
                mount_ns=self.mount_ns,
            )
        self.process: Process | None = None
        self.port = 0
        self.healthz_port = 0
        self._client: CertPair | None = None
        self._serving: CertPair | None = None
        self._kubeconfig: Path | None = None
        self._starts = 0

    # -- paths tests use -------------------------------------------------------------------
    @property
    def address(self) -> str:
        """Where the kubelet's API and healthz listen: 127.0.0.1, or on the real runtime the
        node's own address (its network namespace's end of the link to the machine)."""
        if self.containerd is not None:
            return self.containerd.network.node_ip
        return "127.0.0.1"

    @property
    def node_name(self) -> str:
        return self.options.node_name

    @property
    def device_plugin_dir(self) -> Path:
        """Where device plugins put their sockets and find ``kubelet.sock``."""
        if self.options.private_device_plugin_dir:
            return self.root_dir / "device-plugins"
        return HOST_DEVICE_PLUGIN_DIR

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugin_dir / "kubelet.sock"

    @property
    def plugins_registry_dir(self) -> Path:
        return self.root_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        return self.root_dir / "plugins"

    @property
    def pod_resources_socket(self) -> Path:
        return self.root_dir / "pod-resources" / "kubelet.sock"

    @property
    def cri_socket(self) -> Path:
        if self.containerd is not None:
            return self.containerd.socket
        return self.cri_dir / "cri.sock"

    @property
    def cdi_dir(self) -> Path:
        """The CDI spec directory the real runtime reads (agents under test write there)."""
        return self.workdir / "cdi"

    @property
    def device_root(self) -> Path:
        """Where the tests' real device nodes live (an agent's ``--device-root``)."""
        return self.workdir / "devices"

    def mknod(self, paths: list[str]) -> list[Path]:
        """Create character device nodes ``<device_root>/<path>`` for ``/dev/...`` paths
        (see :func:`make_device_nodes`)."""
        return make_device_nodes(self.device_root, paths)

    def container_log(self, namespace: str, pod: str, container: str, attempt: int = 0) -> str:
        """What a container printed (real runtime), without the CRI log line prefixes."""
        logs = self.root_dir / "pod-logs"
        for pod_dir in logs.glob(f"{namespace}_{pod}_*"):
            path = pod_dir / container / f"{attempt}.log"
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()
                # "<time> <stdout|stderr> <F|P> <text>"
                return "".join(
                    (parts[3] if len(parts) > 3 else "") + ("\n" if parts[2:3] == ["F"] else "")
                    for parts in (line.split(" ", 3) for line in lines)
                )
        return ""

    @property
    def container_records_dir(self) -> Path:
        """One JSON file per CreateContainer call the kubelet made (written by fake-cri)."""
        return self.cri_dir / "containers"

    @property
    def config_path(self) -> Path:
        return self.root_dir / "config.yaml"

    @property
    def log_path(self) -> Path:
        return self.logs / "kubelet.log"

    def container_records(
        self, namespace: str | None = None, pod: str | None = None
    ) -> list[ContainerRecord]:
        """CreateContainer calls the kubelet made, oldest first, optionally for one pod."""
        return [
            r
            for r in read_records(self.container_records_dir)
            if (namespace is None or r.namespace == namespace) and (pod is None or r.pod == pod)
        ]

    # -- life cycle ------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> None:
        """Start the CRI runtime (once) and the kubelet; return when the kubelet is healthy."""
        self.launch(timeout)
        self.wait_healthy(timeout)

    def launch(self, timeout: float = 60) -> None:
        """Start the CRI runtime (once) and the kubelet without waiting for the kubelet, so that
        several kubelets start side by side; :meth:`wait_healthy` waits for it."""
        self._prepare()
        if self.cri is None or not self.cri.running():
            self._start_cri(timeout)
        self._start_kubelet()

    def _prepare(self) -> None:
        for d in (
            self.root_dir,
            self.root_dir / "device-plugins",
            self.plugins_registry_dir,
            self.plugins_dir,
            self.cri_dir,
            self.container_records_dir,
            self.logs,
        ):
            d.mkdir(parents=True, exist_ok=True)
        name = self.options.node_name
        if self._client is None:
            pki = self.root_dir / "pki"
            pki.mkdir(exist_ok=True)
            self._client = self.ca.issue(
                f"kubelet-{name}-client",
                f"system:node:{name}",
                organizations=("system:nodes",),
                client=True,
            )
            self._serving = self.ca.issue(
                f"kubelet-{name}-serving",
                f"system:node:{name}",
                organizations=("system:nodes",),
                dns_names=(name, "localhost"),
                ip_addresses=tuple(dict.fromkeys(("127.0.0.1", self.address))),
                server=True,
            )
            # On the real runtime the kubelet reaches the API server as pods do.
            server = f"https://{SERVICE_IP}:443" if self.containerd is not None else self.server
            self._kubeconfig = write_kubeconfig(
                self.root_dir / "kubeconfig",
                server,
                self.ca.cert_path,
                self._client,
                f"system:node:{name}",
            )
        if not self.port:
            self.port, self.healthz_port = free_port(), free_port()

    def _start_cri(self, timeout: float) -> None:
        if self.containerd is not None:
            self.containerd.start(timeout)
            self.cri = self.containerd.process
            if self.apiproxy is None or not self.apiproxy.running():
                self._start_apiproxy(timeout)
            return
        self.cri = Process(
            "fake-cri",
            [
                str(self.bin_dir / "fake-cri"),
                f"--listen={self.cri_socket}",
                f"--record-dir={self.container_records_dir}",
            ],
            self.logs / "fake-cri.log",
        ).start()
        wait_for("fake CRI socket", self.cri_socket.exists, timeout, [self.cri])

    def _start_apiproxy(self, timeout: float) -> None:
        assert self.containerd is not None
        upstream = self.server.removeprefix("https://").rstrip("/")
        argv = [
            sys.executable,
            "-m",
            "kubeacc.testbed.apiproxy",
            f"--netns={self.containerd.network.path}",
            f"--listen={SERVICE_IP}:443",
            f"--upstream={upstream}",
        ]
        log = self.logs / f"apiproxy {self.node_name}.log"
        self.apiproxy = Process(f"apiproxy {self.node_name}", argv, log).start()
        proxy = self.apiproxy
        wait_for("the API server proxy", lambda: APIPROXY_READY in proxy.tail(5), timeout, [proxy])

    def kubelet_config(self) -> dict[str, Any]:
        """The KubeletConfiguration the kubelet runs with."""
        o = self.options
        assert self._serving is not None
        endpoint = f"unix://{self.cri_socket}"
        cfg: dict[str, Any] = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.address,
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": self.address,
            "healthzPort": self.healthz_port,
            "tlsCertFile": str(self._serving.cert),
            "tlsPrivateKeyFile": str(self._serving.key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.ca.cert_path)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "resolvConf": "",
            "clusterDomain": "cluster.local",
            "maxPods": o.max_pods,
            "registerNode": True,
            "nodeStatusUpdateFrequency": "5s",
            "nodeStatusReportFrequency": "30s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "5s",
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "topologyManagerPolicy": o.topology_manager_policy,
            "topologyManagerScope": o.topology_manager_scope,
            "cpuManagerPolicy": o.cpu_manager_policy,
            "memoryManagerPolicy": o.memory_manager_policy,
            "featureGates": dict(o.feature_gates),
            "shutdownGracePeriod": "0s",
            # Keep every path the kubelet writes to inside the work directory.
            "volumePluginDir": str(self.root_dir / "volume-plugins"),
            "podLogsDir": str(self.root_dir / "pod-logs"),
        }
        if o.reserved_system_cpus is not None:
            cfg["reservedSystemCPUs"] = o.reserved_system_cpus
        elif o.cpu_manager_policy == "static":
            cfg["reservedSystemCPUs"] = "0"
        if o.memory_manager_policy == "Static":
            cfg["kubeReserved"] = {"memory": "100Mi"}
            cfg["reservedMemory"] = [{"numaNode": 0, "limits": {"memory": "150Mi"}}]
        cfg.update(o.extra_config)
        return cfg

    def _start_kubelet(self) -> None:
        assert self._kubeconfig is not None
        self.config_path.write_text(yaml.safe_dump(self.kubelet_config(), sort_keys=False))
        o = self.options
        argv = [
            str(self.bin_dir / "kubelet"),
            f"--config={self.config_path}",
            f"--kubeconfig={self._kubeconfig}",
            f"--root-dir={self.root_dir}",
            f"--cert-dir={self.root_dir / 'pki'}",
            f"--hostname-override={o.node_name}",
            f"--v={o.verbosity}",
        ]
        if o.labels:
            argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in o.labels.items()))
        env = None
        if self.containerd is not None:
            assert self.mount_ns is not None
            argv = [
                *self.containerd.network.enter(),
                *self.mount_ns.enter(),
                *argv,
                f"--node-ip={self.address}",
            ]
        elif o.private_device_plugin_dir and shutil.which("unshare"):
            env = dict(os.environ)
            env["KUBEACC_DP_DIR"] = str(self.root_dir / "device-plugins")
            env["KUBEACC_HOST_DP_DIR"] = str(HOST_DEVICE_PLUGIN_DIR)
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                _NAMESPACE_WRAPPER,
                "kubelet",
                *argv,
            ]
        elif o.private_device_plugin_dir:
            raise RuntimeError("unshare(1) is needed for a private device-plugin directory")
        self._starts += 1
        self.process = Process(f"kubelet {o.node_name}", argv, self.log_path, env=env).start()

    def wait_healthy(self, timeout: float = 60) -> None:
        assert self.process is not None
        wait_for(
            f"kubelet /healthz of {self.node_name}",
            lambda: http_ok(f"http://{self.address}:{self.healthz_port}/healthz"),
            timeout,
            watch=[self.process],
        )

    def wait_registration_socket(self, timeout: float = 30) -> None:
        """Wait until the kubelet's device-plugin registration socket exists."""
        assert self.process is not None
        wait_for(
            "kubelet device-plugin socket", self.kubelet_socket.exists, timeout, [self.process]
        )

    def stop_kubelet(self) -> None:
        if self.process is not None:
            self.process.stop()

    def restart(self, options: KubeletOptions | None = None, timeout: float = 60) -> None:
        """Stop the kubelet and start it again (the CRI runtime and its pods stay)."""
        self.stop_kubelet()
        if options is not None:
            if options.node_name != self.options.node_name:
                raise ValueError("a restart cannot rename the node")
            # The kubelet refuses to start when its checkpointed manager policy differs.
            if options.cpu_manager_policy != self.options.cpu_manager_policy:
                (self.root_dir / "cpu_manager_state").unlink(missing_ok=True)
            if options.memory_manager_policy != self.options.memory_manager_policy:
                (self.root_dir / "memory_manager_state").unlink(missing_ok=True)
            self.options = options
        old_socket_mtime = _mtime(self.kubelet_socket)
        self._start_kubelet()
        assert self.process is not None
        self.wait_healthy(timeout)
        deadline = time.monotonic() + timeout
        while _mtime(self.kubelet_socket) == old_socket_mtime and time.monotonic() < deadline:
            self.process.check()
            time.sleep(0.05)

    def start_runtime(self, timeout: float = 60) -> None:
        """Start the CRI runtime again after it stopped (a runtime crash); the kubelet stays."""
        if self.cri is None or not self.cri.running():
            self._start_cri(timeout)

    def restart_runtime(self, timeout: float = 60) -> None:
        """Stop and start the real runtime (containerd); running containers stay."""
        if self.containerd is None:
            raise RuntimeError("this kubelet runs on the fake CRI runtime")
        self.containerd.restart(timeout)
        self.cri = self.containerd.process

    def stop(self) -> None:
        self.stop_kubelet()
        if self.containerd is not None:
            self.containerd.shutdown()
        elif self.cri is not None:
            self.cri.stop()
        if self.apiproxy is not None:
            self.apiproxy.stop()
        if self.mount_ns is not None:
            self.mount_ns.delete()


def make_device_nodes(root: Path, paths: list[str]) -> list[Path]:
    """Create character device nodes ``<root>/<path>`` for ``/dev/...`` paths.

    Each gets the numbers of the host's ``/dev/null`` (harmless to open and write), so a
    container they are injected into sees a real device node of that name. Whatever else is
    at a path (a synthetic host's placeholder file) is replaced.
    """
    null = os.stat("/dev/null")
    made = []
    for path in paths:
        node = root / path.lstrip("/")
        node.parent.mkdir(parents=True, exist_ok=True)
        if node.is_symlink() or (node.exists() and not stat.S_ISCHR(node.stat().st_mode)):
            node.unlink()
        if not node.exists():
            os.mknod(node, stat.S_IFCHR | 0o666, null.st_rdev)
        made.append(node)
    return made


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return None
