"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback ports."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubeacc.testbed.certs import CertificateAuthority, CertPair, service_account_keys
from kubeacc.testbed.kubeconfig import http_ok, https_ok, write_kubeconfig
from kubeacc.testbed.procs import Process, free_port, wait_for
from kubeacc.testbed.versions import feature_gate_flag

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"


@dataclass
class Pki:
    """Every certificate and key the cluster's components use."""

    ca: CertificateAuthority
    apiserver: CertPair
    apiserver_kubelet_client: CertPair
    admin: CertPair
    scheduler: CertPair
    controller_manager: CertPair
    service_account: CertPair

    @classmethod
    def create(cls, directory: Path) -> Pki:
        ca = CertificateAuthority(directory)
        return cls(
            ca=ca,
            apiserver=ca.issue(
                "apiserver",
                "kube-apiserver",
                dns_names=(
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ),
                ip_addresses=("127.0.0.1", SERVICE_IP),
                server=True,
            ),
            apiserver_kubelet_client=ca.issue(
                "apiserver-kubelet-client",
                "kube-apiserver-kubelet-client",
                organizations=("system:masters",),
                client=True,
            ),
            admin=ca.issue(
                "admin", "kubernetes-admin", organizations=("system:masters",), client=True
            ),
            scheduler=ca.issue("scheduler", "system:kube-scheduler", client=True),
            controller_manager=ca.issue(
                "controller-manager", "system:kube-controller-manager", client=True
            ),
            service_account=service_account_keys(directory),
        )


@dataclass
class ControlPlane:
    """The control plane of one testbed cluster, rooted at ``workdir``."""

    workdir: Path
    bin_dir: Path
    feature_gates: str = field(default_factory=feature_gate_flag)
    #: API versions served beside resource.k8s.io/v1 (``--runtime-config``), e.g. a beta API
    #: that is off by default.
    apis: tuple[str, ...] = ()
    pki: Pki | None = None
    etcd: Process | None = None
    apiserver: Process | None = None
    scheduler: Process | None = None
    controller_manager: Process | None = None
    apiserver_port: int = 0
    kubeconfig: Path = field(init=False)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    #: KubeSchedulerConfiguration ``extenders`` entries; non-empty: kube-scheduler runs with a
    #: ``--config`` file that lists them (see :meth:`scheduler_config`).
    scheduler_extenders: Sequence[Mapping[str, Any]] = ()

    def __post_init__(self) -> None:
        self.kubeconfig = self.workdir / "admin.kubeconfig"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    def processes(self) -> list[Process]:
        return [
            p
            for p in (self.controller_manager, self.scheduler, self.apiserver, self.etcd)
            if p is not None
        ]

    def start(self, timeout: float = 60) -> None:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pki = pki = Pki.create(self.workdir / "pki")
        self._start_etcd(timeout)
        self.startup_seconds["etcd"] = time.monotonic() - t0
        self._start_apiserver(pki)
        write_kubeconfig(self.kubeconfig, self.server, pki.ca.cert_path, pki.admin, "admin")
        sched_kc = write_kubeconfig(
            self.workdir / "scheduler.kubeconfig",
            self.server,
            pki.ca.cert_path,
            pki.scheduler,
            "system:kube-scheduler",
        )
        kcm_kc = write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig",
            self.server,
            pki.ca.cert_path,
            pki.controller_manager,
            "system:kube-controller-manager",
        )
        assert self.apiserver is not None
        wait_for(
            "kube-apiserver /readyz",
            lambda: https_ok(f"{self.server}/readyz", pki.ca.cert_path, pki.admin),
            timeout,
            watch=[self.apiserver],
        )
        self.startup_seconds["kube-apiserver"] = time.monotonic() - t0
        self._start_scheduler(sched_kc)
        self._start_controller_manager(kcm_kc, pki)

    def stop_apiserver(self) -> None:
        """Take kube-apiserver away, as an outage would; etcd and the other components stay."""
        if self.apiserver is not None:
            self.apiserver.stop()

    def start_apiserver(self, timeout: float = 60) -> None:
        """Bring kube-apiserver back: same address, certificates and etcd; wait for /readyz."""
        assert self.apiserver is not None and self.pki is not None, "start() the control plane"
        if not self.apiserver.running():
            self.apiserver.start()
        pki = self.pki
        wait_for(
            "kube-apiserver /readyz",
            lambda: https_ok(f"{self.server}/readyz", pki.ca.cert_path, pki.admin),
            timeout,
            watch=[self.apiserver],
        )

    def wait_controllers(self, timeout: float = 60) -> None:
        """Wait until scheduler and controller manager answer /healthz."""
        pairs = ((self.scheduler, self._sched_port), (self.controller_manager, self._kcm_port))
        for proc, port in pairs:
            assert proc is not None
            url = f"https://127.0.0.1:{port}/healthz"
            wait_for(f"{proc.name} /healthz", partial(https_ok, url, None), timeout, watch=[proc])

    def _start_etcd(self, timeout: float) -> None:
        client, peer = free_port(), free_port()
        data = self.workdir / "etcd"
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd = Process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=testbed",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=testbed=http://127.0.0.1:{peer}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
            self.logs / "etcd.log",
        ).start()
        wait_for("etcd /health", lambda: http_ok(f"{self.etcd_url}/health"), timeout, [self.etcd])

    def _start_apiserver(self, pki: Pki) -> None:
        self.apiserver_port = free_port()
        self.apiserver = Process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert_path}",
                f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
                f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca.cert_path}",
                # Dial kubelets by address, never by looking their names up in DNS (a real-
                # runtime node's address is reachable: kubectl logs/exec work there).
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--service-account-key-file={pki.service_account.cert}",
                f"--service-account-signing-key-file={pki.service_account.key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--runtime-config="
                + ",".join(f"{api}=true" for api in ("resource.k8s.io/v1", *self.apis)),
                f"--feature-gates={self.feature_gates}",
                "--profiling=false",
                "--endpoint-reconciler-type=none",
                "--v=1",
            ],
            self.logs / "kube-apiserver.log",
        ).start()

    def scheduler_config(self, kubeconfig: Path) -> dict[str, Any]:
        """The KubeSchedulerConfiguration kube-scheduler gets when extenders are configured."""
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "extenders": [dict(e) for e in self.scheduler_extenders],
        }

    def _start_scheduler(self, kubeconfig: Path) -> None:
        self._sched_port = free_port()
        if self.scheduler_extenders:
            config = self.workdir / "scheduler-config.json"  # JSON is YAML
            config.write_text(json.dumps(self.scheduler_config(kubeconfig), indent=2))
            # With --config, kube-scheduler takes its kubeconfig and leader election from there.
            client = [f"--config={config}"]
        else:
            client = [f"--kubeconfig={kubeconfig}", "--leader-elect=false"]
        self.scheduler = Process(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                *client,
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._sched_port}",
                f"--feature-gates={self.feature_gates}",
                "--v=2",
            ],
            self.logs / "kube-scheduler.log",
        ).start()

    def _start_controller_manager(self, kubeconfig: Path, pki: Pki) -> None:
        self._kcm_port = free_port()
        self.controller_manager = Process(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._kcm_port}",
                f"--cert-dir={self.workdir / 'controller-manager-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.service_account.key}",
                f"--root-ca-file={pki.ca.cert_path}",
                f"--cluster-signing-cert-file={pki.ca.pair.cert}",
                f"--cluster-signing-key-file={pki.ca.pair.key}",
                "--controllers=*",
                f"--feature-gates={self.feature_gates}",
                "--v=1",
            ],
            self.logs / "kube-controller-manager.log",
        ).start()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM each component, SIGKILL after ``timeout`` seconds."""
        for proc in self.processes():
            proc.stop(timeout)
