"""One testbed cluster: control plane plus real kubelets (one or several Nodes on this machine),
started and stopped as a unit.

The first kubelet lives in the work directory itself (``kubelet/``, ``cri/``, ``logs/``); every
further node gets ``nodes/<name>/`` with the same layout: its own root directory, private mount
namespace, ports, fake CRI runtime and Node name.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
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
from kubeacc.testbed.procs import rss_bytes, wait_for
from kubeacc.testbed.runtime import ensure_runtime
from kubeacc.testbed.versions import feature_gate_flag
from kubeacc.testbed.volcano import Volcano
from kubeacc.testbed.volcano import ensure_built as ensure_volcano


class Testbed:
    """A running cluster. Create it with :meth:`start`; stop it with :meth:`stop` or ``with``."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path,
        node_options: Sequence[KubeletOptions],
        keep: bool,
        owns_workdir: bool,
        scheduler_extenders: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.keep = keep
        self._owns_workdir = owns_workdir
        self.control_plane = ControlPlane(
            workdir, bin_dir, scheduler_extenders=list(scheduler_extenders)
        )
        self._node_options = list(node_options)
        self._kubelets: dict[str, Kubelet] = {}
        #: containerd & co. (kubeacc.testbed.runtime) when a node runs the real runtime.
        self.runtime_bin_dir: Path | None = None
        self.timings: dict[str, float] = {}
        #: Volcano's scheduler and controller manager, when started with ``volcano=True``.
        self.volcano: Volcano | None = None
        self._stopped = False

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        workdir: Path | str | None = None,
        *,
        kubelet: KubeletOptions | None = None,
        nodes: Sequence[KubeletOptions] | None = None,
        with_kubelet: bool = True,
        bin_dir: Path | None = None,
        keep: bool = False,
        timeout: float = 120,
        out: TextIO = sys.stderr,
        scheduler_extenders: Sequence[Mapping[str, Any]] = (),
        feature_gates: Mapping[str, bool] | None = None,
        apis: Sequence[str] = (),
        volcano: bool = False,
    ) -> Testbed:
        """Build the binaries if needed, start everything, wait until every node is Ready.

        One kubelet (``kubelet`` options, default Node ``node-a``), or one per entry of
        ``nodes`` (distinct node names; they start side by side). ``workdir`` defaults to a
        fresh directory under /tmp (short, because unix socket paths are limited to 107 bytes);
        a directory the testbed created is removed on :meth:`stop` unless ``keep`` is set.
        ``scheduler_extenders``: KubeSchedulerConfiguration ``extenders`` entries (``urlPrefix``,
        verbs, ``managedResources``, ...); kube-scheduler then runs with a ``--config`` file.
        ``feature_gates``: the control plane's gates (default
        :data:`kubeacc.testbed.versions.FEATURE_GATES`), e.g. DRA gates off as 1.34/1.35 ship.
        ``apis``: API versions the API server serves beside ``resource.k8s.io/v1``
        (``scheduling.k8s.io/v1beta1`` for pod groups).
        ``volcano``: also run Volcano's scheduler and controller manager
        (:mod:`kubeacc.testbed.volcano`, built from its pinned source first if needed) as the
        scheduler of the pods naming ``schedulerName: volcano``.
        """
        if nodes is not None and kubelet is not None:
            raise ValueError("give either kubelet or nodes, not both")
        options = list(nodes) if nodes is not None else [kubelet or KubeletOptions()]
        names = [o.node_name for o in options]
        if len(set(names)) != len(names):
            raise ValueError(f"node names must be distinct: {', '.join(names)}")
        if not with_kubelet:
            options = []
        owns = workdir is None
        wd = Path(tempfile.mkdtemp(prefix="kubeacc-tb-")) if workdir is None else Path(workdir)
        wd = wd.resolve()
        bins = bin_dir or ensure_built(out=out)
        tb = cls(wd, bins, options, keep, owns, scheduler_extenders)
        if feature_gates is not None:
            tb.control_plane.feature_gates = feature_gate_flag(dict(feature_gates))
        tb.control_plane.apis = tuple(apis)
        if any(o.runtime == "containerd" for o in options):
            tb.runtime_bin_dir = ensure_runtime(out=out)
        volcano_bin = ensure_volcano() if volcano else None
        try:
            tb._start(timeout)
            if volcano_bin is not None:
                t0 = time.monotonic()
                tb.volcano = Volcano(
                    tb.workdir, tb.logs_dir, tb.kubeconfig, tb.kubectl(), volcano_bin
                ).start(timeout)
                tb.timings["volcano_ready_s"] = time.monotonic() - t0
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
        started = [self._launch_kubelet(o, timeout) for o in self._node_options]
        for k in started:
            k.wait_healthy(timeout)
        cp.wait_controllers(timeout)
        self.timings["controllers_healthy_s"] = time.monotonic() - t0
        self.wait_service_account("default", timeout=timeout)
        for k in started:
            self.wait_node_ready(k.node_name, timeout=timeout)
        if started:
            self.timings["node_ready_s"] = time.monotonic() - t0

    def _node_dir(self, name: str) -> Path:
        return self.workdir if not self._kubelets else self.workdir / "nodes" / name

    def _launch_kubelet(self, options: KubeletOptions, timeout: float) -> Kubelet:
        pki = self.control_plane.pki
        assert pki is not None
        kubelet = Kubelet(
            self._node_dir(options.node_name),
            self.bin_dir,
            self.control_plane.server,
            pki.ca,
            options,
            self.runtime_bin_dir,
        )
        self._kubelets[options.node_name] = kubelet
        kubelet.launch(timeout)
        return kubelet

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
        """The first node's kubelet."""
        if not self._kubelets:
            raise RuntimeError("this testbed was started without a kubelet")
        return next(iter(self._kubelets.values()))

    @property
    def kubelets(self) -> list[Kubelet]:
        """Every node's kubelet, in start order."""
        return list(self._kubelets.values())

    @property
    def node_names(self) -> list[str]:
        return list(self._kubelets)

    def node(self, name: str) -> Kubelet:
        """The kubelet of Node ``name``."""
        try:
            return self._kubelets[name]
        except KeyError:
            known = ", ".join(self._kubelets) or "none"
            raise KeyError(f"no kubelet for node {name!r} (nodes: {known})") from None

    @property
    def node_name(self) -> str:
        return self.kubelet.node_name

    def client(self, field_manager: str = "kubeacc-testbed") -> Client:
        """A lightkube client acting as cluster admin."""
        return Client(KubeConfig.from_file(self.kubeconfig), field_manager=field_manager)

    def kubectl(self) -> list[str]:
        """argv prefix for the testbed's kubectl, already pointed at this cluster."""
        return [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}"]

    def kubelet_configz(self, node: str | None = None) -> dict[str, Any]:
        """The configuration a running kubelet (default: the first) reports on /configz."""
        pki = self.control_plane.pki
        assert pki is not None
        kubelet = self.node(node) if node else self.kubelet
        url = f"https://{kubelet.address}:{kubelet.port}/configz"
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

        kubelet = self.node(node) if node in self._kubelets else None
        watch = [kubelet.process] if kubelet and kubelet.process else []
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
        if self.volcano is not None:
            self.volcano.check()
        for p in self.control_plane.processes():
            p.check()
        for kubelet in self._kubelets.values():
            for proc in (kubelet.cri, kubelet.process):
                if proc is not None:
                    proc.check()

    def memory(self) -> dict[str, int]:
        """Resident memory (bytes) of every running component: ``etcd``, ``kube-apiserver``, …
        and ``kubelet <node>`` / ``fake-cri <node>`` for each node."""
        out: dict[str, int] = {}
        for p in self.control_plane.processes():
            if p.pid is not None and p.running():
                out[p.name] = rss_bytes(p.pid)
        for name, kubelet in self._kubelets.items():
            runtime = "fake-cri" if kubelet.containerd is None else "containerd"
            for label, proc in (("kubelet", kubelet.process), (runtime, kubelet.cri)):
                if proc is not None and proc.pid is not None and proc.running():
                    out[f"{label} {name}"] = rss_bytes(proc.pid)
        return out

    # -- life cycle ------------------------------------------------------------------------
    def restart_kubelet(
        self, options: KubeletOptions | None = None, timeout: float = 60, node: str | None = None
    ) -> None:
        """Restart a kubelet (default: the first; optionally with new options) and wait until
        its node is Ready."""
        kubelet = self.node(node) if node else self.kubelet
        kubelet.restart(options, timeout)
        self.wait_node_ready(kubelet.node_name, timeout=timeout)

    def restart_runtime(self, node: str | None = None, timeout: float = 60) -> None:
        """Restart a node's real container runtime (containerd; default: the first node's) and
        wait until its Node is Ready again. Running containers keep running."""
        kubelet = self.node(node) if node else self.kubelet
        kubelet.restart_runtime(timeout)
        self.wait_node_ready(kubelet.node_name, timeout=timeout)

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
        if self.volcano is not None:
            self.volcano.stop()
        for kubelet in reversed(self._kubelets.values()):
            kubelet.stop()
        # kube-apiserver can wait out the whole grace period for clients that keep their
        # connections open (it never logs the end of its shutdown then); its data is thrown away.
        self.control_plane.stop(timeout=3.0)
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
