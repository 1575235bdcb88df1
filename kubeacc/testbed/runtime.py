"""The testbed's real container runtime: containerd 2 + runc + CNI plugins.

Built from Go modules like the rest of the testbed: ``tools/containerd/go.mod`` pins containerd
(``containerd``, ``containerd-shim-runc-v2``, ``ctr``) and the CNI plugins (``bridge``,
``host-local``, ``loopback``) as Go tools; the binaries land in
``$KUBEACC_CACHE/containerd-<version>-<hash>/bin`` (the hash covers go.mod, go.sum, the
packages and the link flags) and are reused while those are unchanged. runc is Debian's
(``/usr/sbin/runc``; ``scripts/bootstrap.sh`` installs it when it is missing).

One :class:`Containerd` per node, everything under ``<node dir>/containerd``::

    config.toml      containerd configuration (CRI with CDI on, runc, CNI)
    containerd.sock  the CRI / containerd API socket the kubelet and ``ctr`` use
    root/ state/     containerd's own directories
    net.d/           the CNI network: a bridge with host-local addresses
    cni-data/        host-local's address leases
    images/          the OCI tarballs imported at every start (see kubeacc.testbed.images)

containerd runs in the node's network namespace (kubeacc.testbed.nodenet: ``ip netns add
kubeacc-<id>``, linked to the machine by one veth and nothing else): the CNI bridge and the
pods' veth ends live there, so no pod traffic reaches the machine's network. With a node mount
namespace (kubeacc.testbed.mountns) it runs in that one too, next to the kubelet. The namespaces
outlive containerd restarts (pods keep their network and volumes); they are deleted, and every
mount containerd made under its directory is unmounted, when the testbed stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from kubeacc.testbed.build import BuildError, _fmt, _lock, _run_logged, _tail, cache_root, go_env
from kubeacc.testbed.control_plane import SERVICE_IP
from kubeacc.testbed.images import PAUSE_IMAGE, Image, build_images
from kubeacc.testbed.mountns import MountNamespace
from kubeacc.testbed.nodenet import NodeNetwork
from kubeacc.testbed.procs import Process, wait_for

#: Go packages built from tools/containerd, by binary name.
PACKAGES = {
    "containerd": "github.com/containerd/containerd/v2/cmd/containerd",
    "containerd-shim-runc-v2": "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
    "ctr": "github.com/containerd/containerd/v2/cmd/ctr",
    "bridge": "github.com/containernetworking/plugins/plugins/main/bridge",
    "host-local": "github.com/containernetworking/plugins/plugins/ipam/host-local",
    "loopback": "github.com/containernetworking/plugins/plugins/main/loopback",
}
CNI_PLUGINS = ("bridge", "host-local", "loopback")
#: containerd stamps its version with -X; ``containerd --version`` prints it.
_VERSION_PKG = "github.com/containerd/containerd/v2/version"
LDFLAGS = f"-s -w -X {_VERSION_PKG}.Version={{version}} -X {_VERSION_PKG}.Revision=kubeacc"
#: The pod network inside containerd's own network namespace.
POD_SUBNET = "10.88.0.0/16"


def module_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "tools" / "containerd"


def _required(src: Path, module: str) -> str:
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", (src / "go.mod").read_text(), re.M)
    if found is None:
        raise BuildError(f"tools/containerd/go.mod does not require {module}")
    return found.group(1)


def containerd_version(src: Path | None = None) -> str:
    return _required(src or module_dir(), "github.com/containerd/containerd/v2")


def cni_plugins_version(src: Path | None = None) -> str:
    return _required(src or module_dir(), "github.com/containernetworking/plugins")


def bin_dir(src: Path | None = None) -> Path:
    """Where the runtime binaries for these sources are (built or not)."""
    override = os.environ.get("KUBEACC_RUNTIME_BIN")
    if override:
        return Path(override)
    src = src or module_dir()
    h = hashlib.sha256()
    parts = [(src / "go.mod").read_bytes(), (src / "go.sum").read_bytes(), LDFLAGS.encode()]
    for part in [*parts, *(p.encode() for p in PACKAGES.values())]:
        h.update(part)
        h.update(b"\0")
    return cache_root() / f"containerd-{containerd_version(src)}-{h.hexdigest()[:16]}" / "bin"


def is_complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in PACKAGES)


def find_runc() -> Path:
    """runc (``$KUBEACC_RUNC``, else PATH, else /usr/sbin/runc)."""
    candidates = [os.environ.get("KUBEACC_RUNC", ""), shutil.which("runc") or "", "/usr/sbin/runc"]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return Path(c)
    raise BuildError("runc not found: install it (apt-get install runc; scripts/bootstrap.sh does)")


def ensure_runtime(out: TextIO = sys.stderr) -> Path:
    """The directory with containerd, its shim, ctr and the CNI plugins, built if needed."""
    target = bin_dir()
    if os.environ.get("KUBEACC_RUNTIME_BIN"):
        if not is_complete(target):
            raise BuildError(f"KUBEACC_RUNTIME_BIN={target} lacks some of {', '.join(PACKAGES)}")
        return target
    if is_complete(target):
        return target
    if shutil.which("go") is None:
        raise BuildError("the go tool is not on PATH; Go >= 1.26 is needed to build containerd")
    with _lock(target.parent.parent / f".{target.parent.name}.lock"):
        if is_complete(target):
            return target
        return _build(module_dir(), target, out)


def _build(src: Path, target: Path, out: TextIO) -> Path:
    key_dir = target.parent
    key_dir.mkdir(parents=True, exist_ok=True)
    log_path = key_dir / "build.log"
    version = containerd_version(src)
    start = time.monotonic()
    out.write(
        f"[runtime build] containerd {version}, CNI plugins {cni_plugins_version(src)} -> "
        f"{target} (log {log_path})\n"
    )
    out.flush()
    tmp = Path(tempfile.mkdtemp(prefix="bin.", dir=key_dir))
    flags = LDFLAGS.format(version=version)
    try:
        with log_path.open("w") as log:
            env = go_env()
            rc = _run_logged(["go", "mod", "download"], src, env, log, None)
            if rc != 0:
                raise BuildError(f"go mod download failed in {src}:\n{_tail(log_path)}")
            out.write(f"[runtime build] modules ready ({_fmt(time.monotonic() - start)})\n")
            out.flush()
            cmd = ["go", "build", "-ldflags", flags, "-o", f"{tmp}/", *PACKAGES.values()]
            rc = _run_logged(cmd, src, env, log, None)
        missing = [b for b in PACKAGES if not (tmp / b).is_file()]
        if rc != 0 or missing:
            raise BuildError(f"runtime build failed (exit {rc}):\n{_tail(log_path)}")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out.write(f"[runtime build] done in {_fmt(time.monotonic() - start)}: {target}\n")
    out.flush()
    return target


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


class Containerd:
    """One node's containerd (see the module doc); the kubelet's CRI endpoint."""

    def __init__(
        self,
        node_dir: Path,
        bin_dir: Path,
        cdi_dirs: list[Path],
        logs: Path,
        name: str = "containerd",
        mount_ns: MountNamespace | None = None,
    ) -> None:
        self.dir = node_dir / "containerd"
        self.bin_dir = bin_dir
        self.cdi_dirs = cdi_dirs
        self.log_path = logs / f"{name}.log"
        self.name = name
        self.process: Process | None = None
        self.images: list[Image] = []
        digest = hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:10]
        #: The node's network namespace and its link to the machine, made at the first start.
        self.network = NodeNetwork(digest, SERVICE_IP)
        #: The node's mount namespace (shared with its kubelet), if it has one.
        self.mount_ns = mount_ns

    @property
    def netns(self) -> str:
        """The node's network namespace (``ip netns`` name)."""
        return self.network.netns

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def config_path(self) -> Path:
        return self.dir / "config.toml"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def config(self) -> str:
        """containerd's config.toml (version 3, containerd 2.x)."""
        runc = find_runc()
        d = self.dir
        cri_rt = "plugins.'io.containerd.cri.v1.runtime'"
        cri_img = "plugins.'io.containerd.cri.v1.images'"
        return f"""version = 3
root = '{d / "root"}'
state = '{d / "state"}'
disabled_plugins = ['io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.erofs',
  'io.containerd.nri.v1.nri', 'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing']

[grpc]
  address = '{self.socket}'

[ttrpc]
  address = '{d / "ttrpc.sock"}'

[debug]
  level = 'info'

[{cri_rt}]
  # CDI is always on in containerd 2.x; these are the directories it reads specs from.
  cdi_spec_dirs = {_toml_list([str(p) for p in self.cdi_dirs])}
  # This VM does not let anyone lower oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  # Pod network namespaces are bind-mounted under state/ (not /var/run/netns).
  netns_mounts_under_state_dir = true

[{cri_rt}.containerd]
  default_runtime_name = 'runc'

[{cri_rt}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[{cri_rt}.containerd.runtimes.runc.options]
  BinaryName = '{runc}'
  Root = '{d / "state" / "runc"}'
  SystemdCgroup = false

[{cri_rt}.cni]
  bin_dirs = ['{self.bin_dir}']
  conf_dir = '{d / "net.d"}'
  max_conf_num = 1

[{cri_img}]
  snapshotter = 'overlayfs'

[{cri_img}.pinned_images]
  sandbox = '{PAUSE_IMAGE}'

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""

    def network_config(self) -> str:
        """The pod network: bridge ``kbr0`` with host-local addresses, no masquerading."""
        d = self.dir
        return f"""{{
  "cniVersion": "1.0.0",
  "name": "kubeacc-testbed",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "kbr0",
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "{POD_SUBNET}"}}]],
        "dataDir": "{d / "cni-data"}"
      }}
    }}
  ]
}}
"""

    def start(self, timeout: float = 60) -> None:
        """Start containerd (in its own network and mount namespaces), import the images."""
        for sub in ("root", "state", "net.d", "cni-data", "images"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        for cdi_dir in self.cdi_dirs:
            cdi_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config())
        (self.dir / "net.d" / "10-kubeacc.conflist").write_text(self.network_config())
        if not self.images:
            self.images = build_images(self.dir / "images")
        self.socket.unlink(missing_ok=True)
        self.network.ensure()
        if self.mount_ns is not None:
            self.mount_ns.ensure()
        env = dict(os.environ)
        # The shim and runc are found on PATH (containerd starts containerd-shim-runc-v2).
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        argv = [
            *self.network.enter(),
            *(self.mount_ns.enter() if self.mount_ns else []),
            str(self.bin_dir / "containerd"),
            f"--config={self.config_path}",
        ]
        self.process = Process(self.name, argv, self.log_path, env=env).start()
        wait_for(f"{self.name} socket", self._answers, timeout, [self.process], interval=0.1)
        for image in self.images:
            self.import_image(image)

    def import_image(self, image: Image) -> None:
        """Import an OCI tarball into the CRI's image store (kept across restarts)."""
        self.ctr("images", "import", "--local", str(image.tarball), timeout=300)

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        return self.ctr("version", check=False).returncode == 0

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this containerd, namespace ``k8s.io`` (the CRI's)."""
        argv = [
            str(self.bin_dir / "ctr"),
            f"--address={self.socket}",
            "--namespace=k8s.io",
            *args,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def running(self) -> bool:
        return self.process is not None and self.process.running()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop containerd; the containers (their shims) keep running, as on a real node."""
        if self.process is not None:
            self.process.stop(timeout)

    def restart(self, timeout: float = 60) -> None:
        """Stop and start containerd again.

        It runs again in the node's network (and mount) namespace; containers already running
        stay (their shims outlive containerd) and keep their network and volumes.
        """
        self.stop()
        self.start(timeout)

    def shim_pids(self) -> list[int]:
        """This containerd's shims (their command line names its socket)."""
        needle = str(self.socket).encode()
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and needle in cmdline:
                pids.append(int(proc.name))
        return pids

    def shutdown(self) -> None:
        """The end of the testbed: kill every container, stop containerd and its shims,
        unmount what it mounted, delete the network namespace."""
        tasks: list[str] = []
        if self.running():
            tasks = self.ctr("tasks", "list", "--quiet", check=False).stdout.split()
            for task in tasks:
                # Kills the task and deletes it: runc removes its cgroups.
                self.ctr("tasks", "delete", "--force", task, check=False)
        self.stop()
        for pid in self.shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        # Whatever a killed shim could not clean up: the tasks' empty cgroups (cgroupfs).
        for task in tasks:
            for cgroup in Path("/sys/fs/cgroup").glob(f"*/k8s.io/{task}"):
                with contextlib.suppress(OSError):
                    cgroup.rmdir()
        if self.mount_ns is not None:
            self.mount_ns.unmount(self.mount_ns.mounts_under(self.dir))
        for mount in reversed(self._mounts()):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        self.network.delete()

    def _mounts(self) -> list[str]:
        """Mount points under this containerd's directory, in mount order."""
        prefix = str(self.dir.resolve()) + "/"
        out = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                out.append(point)
        return out
