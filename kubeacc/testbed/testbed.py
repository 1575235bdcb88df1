"""One testbed cluster: control plane plus one real kubelet, started and stopped as a unit."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import Node, ServiceAccount

from kubeacc.testbed.build import ensure_built
from kubeacc.testbed.control_plane import ControlPlane
from kubeacc.testbed.kubeconfig import https_get_json
from kubeacc.testbed.kubelet import Kubelet, KubeletOptions
from kubeacc.testbed.procs import wait_for


class Testbed:
    """A running cluster. Create it with :meth:`start`; stop it with :meth:`stop` or ``with``."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path,
        kubelet_options: KubeletOptions | None,
        keep: bool,
        owns_workdir: bool,
    ) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.keep = keep
        self._owns_workdir = owns_workdir
        self.control_plane = ControlPlane(workdir, bin_dir)
        self._kubelet_options = kubelet_options
        self._kubelet: Kubelet | None = None
        self.timings: dict[str, float] = {}
        self._stopped = False

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        workdir: Path | str | None = None,
        *,
        kubelet: KubeletOptions | None = None,
        with_kubelet: bool = True,
        bin_dir: Path | None = None,
        keep: bool = False,
        timeout: float = 120,
        out: TextIO = sys.stderr,
    ) -> Testbed:
        """Build the binaries if needed, start everything, wait for a Ready node.

        ``workdir`` defaults to a fresh directory under /tmp (short, because unix socket paths
        are limited to 107 bytes); a directory the testbed created is removed on :meth:`stop`
        unless ``keep`` is set.
        """
        owns = workdir is None
        wd = Path(tempfile.mkdtemp(prefix="kubeacc-tb-")) if workdir is None else Path(workdir)
        wd = wd.resolve()
        bins = bin_dir or ensure_built(out=out)
        options = (kubelet or KubeletOptions()) if with_kubelet else None
        tb = cls(wd, bins, options, keep, owns)
        try:
            tb._start(timeout)
        except BaseException:
            tb.keep = True  # leave the logs for the failure report
            tb.stop()
            raise
        return tb

    def _start(self, timeout: float) -> None:
        t0 = time.monotonic()
        cp = self.control_plane
        cp.start(timeout)
        self.timings["apiserver_ready_s"] = time.monotonic() - t0
        assert cp.pki is not None
        if self._kubelet_options is not None:
            self._kubelet = Kubelet(
                self.workdir, self.bin_dir, cp.server, cp.pki.ca, self._kubelet_options
            )
            self._kubelet.start(timeout)
        cp.wait_controllers(timeout)
        self.timings["controllers_healthy_s"] = time.monotonic() - t0
        self.wait_service_account("default", timeout=timeout)
        if self._kubelet is not None:
            self.wait_node_ready(timeout=timeout)
            self.timings["node_ready_s"] = time.monotonic() - t0

    # -- access ----------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (client certificate in system:masters)."""
        return self.control_plane.kubeconfig

    @property
    def server(self) -> str:
        return self.control_plane.server

    @property
    def logs_dir(self) -> Path:
        return self.control_plane.logs

    @property
    def kubelet(self) -> Kubelet:
        if self._kubelet is None:
            raise RuntimeError("this testbed was started without a kubelet")
        return self._kubelet

    @property
    def node_name(self) -> str:
        return self.kubelet.node_name

    def client(self, field_manager: str = "kubeacc-testbed") -> Client:
        """A lightkube client acting as cluster admin."""
        return Client(KubeConfig.from_file(self.kubeconfig), field_manager=field_manager)

    def kubectl(self) -> list[str]:
        """argv prefix for the testbed's kubectl, already pointed at this cluster."""
        return [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}"]

    def kubelet_configz(self) -> dict[str, Any]:
        """The configuration the running kubelet reports on its /configz endpoint."""
        pki = self.control_plane.pki
        assert pki is not None
        url = f"https://127.0.0.1:{self.kubelet.port}/configz"
        data = https_get_json(url, pki.ca.cert_path, pki.admin)
        return dict(data["kubeletconfig"])

    # -- waiting ---------------------------------------------------------------------------
    def wait_node_ready(self, name: str | None = None, timeout: float = 60) -> None:
        node = name or self.node_name
        client = self.client()

        def ready() -> bool:
            obj = client.get(Node, node)
            conds = (obj.status.conditions if obj.status else None) or []
            return any(c.type == "Ready" and c.status == "True" for c in conds)

        watch = [self.kubelet.process] if self.kubelet.process else []
        wait_for(f"node {node} Ready", ready, timeout, watch=watch, interval=0.2)

    def wait_service_account(
        self, namespace: str, name: str = "default", timeout: float = 60
    ) -> None:
        """Wait for a namespace's service account (pods are refused until it exists)."""
        client = self.client()
        wait_for(
            f"service account {namespace}/{name}",
            lambda: client.get(ServiceAccount, name, namespace=namespace) is not None,
            timeout,
            watch=self.control_plane.processes(),
            interval=0.2,
        )

    def check_alive(self) -> None:
        """Raise (with the log tail) if any component has exited."""
        for p in self.control_plane.processes():
            p.check()
        if self._kubelet is not None:
            for proc in (self._kubelet.cri, self._kubelet.process):
                if proc is not None:
                    proc.check()

    # -- life cycle ------------------------------------------------------------------------
    def restart_kubelet(self, options: KubeletOptions | None = None, timeout: float = 60) -> None:
        """Restart the kubelet (optionally with new options) and wait until the node is Ready."""
        self.kubelet.restart(options, timeout)
        self.wait_node_ready(timeout=timeout)

    def stop_apiserver(self) -> None:
        """An API server outage: clients get connection refused until :meth:`start_apiserver`."""
        self.control_plane.stop_apiserver()

    def start_apiserver(self, timeout: float = 60) -> None:
        """End the outage: the same API server (address, certificates, etcd data) is back."""
        self.control_plane.start_apiserver(timeout)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._kubelet is not None:
            self._kubelet.stop()
        self.control_plane.stop()
        if self._owns_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.keep = True
        self.stop()
