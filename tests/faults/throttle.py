"""The fault runner's API faults that leave the API server up but unable to serve:

- ``apiserver-throttled``: kube-apiserver restarted (same etcd, address and certificates) with
  :data:`LIMIT_FLAGS`: one read-only and one mutating request in flight, API Priority and
  Fairness off so that the plain max-in-flight filter answers every request past the limit at
  once with ``429`` and ``Retry-After: 1`` (with APF a request waits in a queue first and is
  refused only once the queue is full or its wait is over, which makes whether a fault bit a
  matter of timing). Members of ``system:masters`` are never refused by that filter, so the
  agents run with their own certificates (deploy/rbac/agent.yaml) and the workload as a user
  of its own (:func:`workload_client`); kubelets, scheduler and controller manager have their
  own identities anyway. A load generator (:class:`Load`, a user of its own too) keeps the
  slots busy while the workload keeps stepping; the API server's ``apiserver_request_total``
  answers of code 429 are read before it is restarted with its normal limits. A fault that
  never bit (no 429 outside the load's own) is reported so and fails the short run.
- ``etcd-outage``: etcd stopped (SIGTERM) while kube-apiserver keeps running, the workload
  stepping and a probe sending a read, a list and a write every second and recording what it
  got (status code, or the client's exception, and how long it took); then etcd started again
  on its data.

Recovery is timed from the end of the fault (API server up with normal limits, etcd started)
until the API server is ready, every node Ready, and every agent that failed to publish during
the fault logged that publishing works again.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from kubeacc.testbed import Testbed
from kubeacc.testbed.certs import CertPair
from kubeacc.testbed.identities import agent_kubeconfig, cert_kubeconfig
from kubeacc.testbed.kubeconfig import http_ok
from kubeacc.testbed.procs import wait_for

THROTTLED = "apiserver-throttled"
ETCD_OUTAGE = "etcd-outage"
KINDS = (THROTTLED, ETCD_OUTAGE)

#: kube-apiserver's flags while throttled (see the module doc for why APF is off).
LIMIT_FLAGS = (
    "--max-requests-inflight=1",
    "--max-mutating-requests-inflight=1",
    "--enable-priority-and-fairness=false",
)
#: A user of the workload's own (cluster-admin by RBAC, not in system:masters).
WORKLOAD_USER = "kubeacc:faults:workload"
#: The load generator's user and namespace.
LOAD_USER = "kubeacc:faults:load"
LOAD_NAMESPACE = "faults-load"
#: ConfigMaps the load lists (each ``LOAD_BYTES``): a list the server takes a while to answer.
LOAD_OBJECTS = 40
LOAD_BYTES = 16 * 1024
#: The agents' own logs of an answer waited out (kubeacc.retryafter) and of publishing.
AGENT_429 = "API server answered 429"
PUBLISH_FAILED = "publishing failed"
PUBLISH_AGAIN = "publishing works again"

_TERMINATIONS = re.compile(r"^apiserver_request_terminations_total\{([^}]*)\} (\S+)$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def bind_cluster_admin(admin: Client, user: str) -> None:
    name = user.replace(":", "-")
    binding = ClusterRoleBinding(
        metadata=ObjectMeta(name=name),
        roleRef=RoleRef(
            apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
        ),
        subjects=[Subject(kind="User", name=user, apiGroup="rbac.authorization.k8s.io")],
    )
    admin.apply(binding, field_manager="kubeacc-faults", force=True)


def workload_client(testbed: Testbed, workdir: Path) -> Client:
    """The workload's client: cluster-admin by RBAC but not in ``system:masters``, so that the
    API server's in-flight limits apply to it as to any user's."""
    bind_cluster_admin(testbed.client(field_manager="kubeacc-faults"), WORKLOAD_USER)
    kubeconfig = cert_kubeconfig(testbed, workdir, WORKLOAD_USER, ())
    return Client(KubeConfig.from_file(kubeconfig), field_manager="kubeacc-faults")


def agent_identity(testbed: Testbed, node: str, workdir: Path) -> Path:
    """Node ``node``'s agent kubeconfig: its own certificate, as deploy/rbac/agent.yaml has it."""
    return agent_kubeconfig(testbed, node, workdir)


def restart_apiserver(testbed: Testbed, flags: tuple[str, ...], timeout: float) -> float:
    """kube-apiserver stopped and started with ``flags`` in place of :data:`LIMIT_FLAGS`'s
    (none: its defaults), on the same etcd, address and certificates; returns when it was
    started again (``time.monotonic()``), once it is ready."""
    proc = testbed.control_plane.apiserver
    assert proc is not None
    names = {f.split("=", 1)[0] for f in LIMIT_FLAGS}
    proc.argv = [a for a in proc.argv if a.split("=", 1)[0] not in names] + list(flags)
    testbed.stop_apiserver()
    started = time.monotonic()
    testbed.start_apiserver(timeout)
    return started


def _tls(testbed: Testbed, pair: CertPair) -> ssl.SSLContext:
    pki = testbed.control_plane.pki
    assert pki is not None
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    ctx.load_cert_chain(str(pair.cert), str(pair.key))
    return ctx


def answers_429(testbed: Testbed) -> Counter[str]:
    """``verb resource`` -> requests this API server process refused with 429 (its /metrics:
    ``apiserver_request_terminations_total``; ``apiserver_request_total`` also counts the
    requests of ``system:masters`` past the limit, which the filter serves all the same)."""
    pki = testbed.control_plane.pki
    assert pki is not None
    with httpx2.Client(verify=_tls(testbed, pki.admin), timeout=30) as http:
        text = http.get(testbed.server + "/metrics").raise_for_status().text
    out: Counter[str] = Counter()
    for labels, value in _TERMINATIONS.findall(text):
        got = dict(_LABEL.findall(labels))
        if got.get("code") == "429":
            out[f"{got.get('verb')} {got.get('resource') or '-'}"] += int(float(value))
    return out


class MutatingSlotHeld:
    """``with MutatingSlotHeld(testbed):`` one write's headers sent, its body never finished: it
    holds a mutating in-flight slot (the API server reads a body after admitting the request)
    until the block ends and the connection is closed. Under :data:`LIMIT_FLAGS` every other
    write of a user outside ``system:masters`` is answered 429 meanwhile."""

    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed
        self._sock: ssl.SSLSocket | None = None

    def __enter__(self) -> MutatingSlotHeld:
        pki = self.testbed.control_plane.pki
        assert pki is not None
        port = self.testbed.control_plane.apiserver_port
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._sock = _tls(self.testbed, pki.admin).wrap_socket(raw, server_hostname="127.0.0.1")
        head = (
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n{"
        )
        self._sock.sendall(head.encode())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()


class Load:
    """Threads that keep kube-apiserver's in-flight slots busy as :data:`LOAD_USER`: readers
    list :data:`LOAD_NAMESPACE`'s ConfigMaps, writers create and delete one. A refused request
    is sent again after 10 ms (the load does not honour Retry-After: it is the crowd)."""

    def __init__(self, testbed: Testbed, readers: int = 4, writers: int = 2) -> None:
        self.testbed = testbed
        self.readers = readers
        self.writers = writers
        self.answers: Counter[int] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pair: CertPair | None = None

    def prepare(self) -> None:
        """The namespace, its ConfigMaps and the load's user (once)."""
        if self._pair is not None:
            return
        admin = self.testbed.client(field_manager="kubeacc-faults")
        with contextlib.suppress(ApiError):
            admin.create(Namespace(metadata=ObjectMeta(name=LOAD_NAMESPACE)))
        blob = "x" * LOAD_BYTES
        for i in range(LOAD_OBJECTS):
            meta = ObjectMeta(name=f"load-{i}", namespace=LOAD_NAMESPACE)
            with contextlib.suppress(ApiError):
                admin.create(ConfigMap(metadata=meta, data={"blob": blob}))
        bind_cluster_admin(admin, LOAD_USER)
        pki = self.testbed.control_plane.pki
        assert pki is not None
        self._pair = pki.ca.issue("faults-load", LOAD_USER, client=True)

    def __enter__(self) -> Load:
        self.prepare()
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._run, args=(i < self.readers, i), daemon=True)
            for i in range(self.readers + self.writers)
        ]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _run(self, reader: bool, i: int) -> None:
        assert self._pair is not None
        base = f"{self.testbed.server}/api/v1/namespaces/{LOAD_NAMESPACE}/configmaps"
        body = {"metadata": {"name": f"w-{i}"}, "data": {"k": "v"}}
        with httpx2.Client(verify=_tls(self.testbed, self._pair), timeout=10) as http:
            while not self._stop.is_set():
                try:
                    if reader:
                        codes = [http.get(base).status_code]
                    else:
                        codes = [
                            http.post(base, json=body).status_code,
                            http.delete(f"{base}/w-{i}").status_code,
                        ]
                except httpx2.HTTPError:
                    codes = [0]
                    self._stop.wait(0.2)
                with self._lock:
                    self.answers.update(codes)
                if 429 in codes:
                    self._stop.wait(0.01)


@dataclass
class ApiFaultLog:
    """What the API faults did, for the runner's report."""

    #: per throttled fault: the 429 answers by ``verb resource`` (the load's own listed apart)
    throttled: list[dict[str, Any]] = field(default_factory=list)
    #: per etcd outage: what the probe's requests got
    etcd: list[dict[str, Any]] = field(default_factory=list)

    def bit(self) -> list[bool]:
        """Per throttled fault: whether anything but the load was answered 429."""
        return [bool(t["others_429"]) for t in self.throttled]

    def as_json(self) -> dict[str, Any]:
        return {"apiserver_throttled": self.throttled, "etcd_outage": self.etcd}


class ApiFaults:
    """Injects :data:`KINDS` (the runner's Injector hands them here)."""

    def __init__(
        self,
        testbed: Testbed,
        agent_logs: Callable[[], dict[str, str]],
        ready_timeout: float,
    ) -> None:
        self.testbed = testbed
        self.agent_logs = agent_logs
        self.ready_timeout = ready_timeout
        self.load = Load(testbed)
        #: called about once a second during a fault (the runner: one workload step)
        self.during: Callable[[], None] = lambda: None
        self.log = ApiFaultLog()
        #: each agent's log length when the fault began (its publishing is judged after it)
        self._marks: dict[str, int] = {}

    def inject(self, kind: str, seconds: float) -> float:
        if kind == THROTTLED:
            return self._throttled(seconds)
        if kind == ETCD_OUTAGE:
            return self._etcd_outage(seconds)
        raise ValueError(f"unknown API fault {kind!r}")

    def _keep_stepping(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.during()
            time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))

    def _throttled(self, seconds: float) -> float:
        self.load.prepare()
        self._marks = {n: len(log) for n, log in self.agent_logs().items()}
        before = {n: log.count(AGENT_429) for n, log in self.agent_logs().items()}
        restart_apiserver(self.testbed, LIMIT_FLAGS, self.ready_timeout)
        self.load.answers.clear()
        with self.load:
            self._keep_stepping(seconds)
            refused = answers_429(self.testbed)
        # the load's own: its verbs on configmaps (nobody else touches configmaps meanwhile)
        own = {k: n for k, n in refused.items() if k.endswith(" configmaps")}
        others = {k: n for k, n in refused.items() if k not in own}
        t0 = restart_apiserver(self.testbed, (), self.ready_timeout)
        self._ready()
        took = time.monotonic() - t0
        agents = {
            n: log.count(AGENT_429) - before.get(n, 0) for n, log in self.agent_logs().items()
        }
        self.log.throttled.append(
            {
                "seconds": seconds,
                "load_answers": {str(k): v for k, v in sorted(self.load.answers.items())},
                "load_429": sum(own.values()),
                "others_429": dict(sorted(others.items())),
                "agents_waited_out_429": agents,
            }
        )
        return took

    def _etcd_outage(self, seconds: float) -> float:
        cp = self.testbed.control_plane
        assert cp.etcd is not None
        probe = _Probe(self.testbed)
        self._marks = {n: len(log) for n, log in self.agent_logs().items()}
        cp.etcd.stop()
        down = time.monotonic()
        with probe:
            self._keep_stepping(seconds)  # a step blocked on the API server may take longer
            cp.etcd.start()
            t0 = time.monotonic()
        wait_for(
            "etcd /health", lambda: http_ok(f"{cp.etcd_url}/health"), self.ready_timeout, [cp.etcd]
        )
        self._ready()
        took = time.monotonic() - t0
        self.log.etcd.append(
            {
                "seconds": seconds,
                "down_s": round(t0 - down, 1),
                "answers": dict(sorted(probe.answers.items())),
            }
        )
        return took

    def _ready(self) -> None:
        """API server ready, every node Ready, every agent publishing again."""
        self.testbed.start_apiserver(self.ready_timeout)
        for name in self.testbed.node_names:
            self.testbed.wait_node_ready(name, timeout=self.ready_timeout)
        wait_for("every agent publishing again", self._agents_publish, self.ready_timeout, [])

    def _agents_publish(self) -> bool:
        for name, log in self.agent_logs().items():
            since = log[self._marks.get(name, 0) :]
            if since.rfind(PUBLISH_FAILED) > since.rfind(PUBLISH_AGAIN):
                return False
        return True


class _Probe:
    """During an etcd outage: every second a read, a list and a write, each on a thread of its
    own, as the admin with a 65 s timeout (past kube-apiserver's own 60 s), each answer recorded
    as ``"<verb> <code or exception> ~<seconds, rounded up to 5>s"``."""

    TIMEOUT = 65.0

    def __init__(self, testbed: Testbed) -> None:
        self.client = Client(
            KubeConfig.from_file(testbed.kubeconfig),
            field_manager="kubeacc-faults",
            timeout=httpx2.Timeout(self.TIMEOUT),
        )
        self.answers: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._calls: list[threading.Thread] = []
        self._n = 0

    def __enter__(self) -> _Probe:
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._ticker.join(10)
        for t in self._calls:
            t.join(self.TIMEOUT + 5)

    def _tick(self) -> None:
        calls: list[tuple[str, Callable[[], object]]] = [
            ("GET", lambda: self.client.get(Namespace, "default")),
            ("LIST", lambda: list(self.client.list(Pod, namespace="faults"))),
            ("CREATE", self._create),
        ]
        while not self._stop.is_set():
            for verb, call in calls:
                t = threading.Thread(target=self._one, args=(verb, call), daemon=True)
                t.start()
                self._calls.append(t)
            self._stop.wait(1.0)

    def _create(self) -> object:
        with self._lock:
            self._n += 1
            n = self._n
        meta = ObjectMeta(generateName="etcd-probe-", namespace="default")
        return self.client.create(ConfigMap(metadata=meta, data={"n": str(n)}))

    def _one(self, verb: str, call: Callable[[], object]) -> None:
        t0 = time.monotonic()
        try:
            call()
            got = "200"
        except ApiError as exc:
            got = str(exc.status.code)
        except httpx2.HTTPStatusError as exc:
            got = str(exc.response.status_code)
        except httpx2.HTTPError as exc:
            got = type(exc).__name__
        took = time.monotonic() - t0
        with self._lock:
            self.answers[f"{verb} {got} ~{5 * (int(took) // 5 + 1)}s"] += 1
