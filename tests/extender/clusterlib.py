"""The testbed of the extender's cluster tests: real kube-scheduler configured with
``kubeacc extender``, real kubelets, node agents (device plugin or DRA), life-cycle agents
publishing Accelerators, and the extender as a process with its ServiceAccount's token."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.config.kubeconfig import KubeConfig

from kubeacc.agent.dra.classes import apply_device_classes
from kubeacc.crds.deploy import apply_manifest, manifests
from kubeacc.crds.resources import Accelerator, as_dict, install_crds
from kubeacc.extender.schedconfig import SchedulerTLS, scheduler_entry
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.testbed.extendertls import ExtenderPKI, issue_extender_pki
from kubeacc.testbed.identities import _stem, agent_kubeconfig, install_agent_access, token_client
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.testbed.helpers import eventually

#: Resources kube-scheduler sends to the extender in test_cluster (managedResources).
MANAGED = ("kubeacc.io/gpu-memory", "kubeacc.io/gpu-cores", "kubeacc.io/gpu")


class Extender:
    """``kubeacc extender`` as a process, as the chart runs it: the verbs over TLS for
    kube-scheduler's client certificate only, the probes on a plain port."""

    def __init__(self, kubeconfig: Path, port: int, log: Path, pki: ExtenderPKI) -> None:
        self.kubeconfig = kubeconfig
        self.port = port
        self.probe_port = free_port()
        self.log_path = log
        self.pki = pki
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.tls = ssl.create_default_context(cafile=str(pki.ca))
        self.tls.load_cert_chain(pki.client.cert, pki.client.key)

    def start(self) -> None:
        self.starts += 1
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubeacc.cli",
                "extender",
                f"--kubeconfig={self.kubeconfig}",
                f"--address=127.0.0.1:{self.port}",
                f"--probe-address=127.0.0.1:{self.probe_port}",
                f"--tls-cert-file={self.pki.server.cert}",
                f"--tls-key-file={self.pki.server.key}",
                f"--client-ca-file={self.pki.ca}",
                f"--identity=extender-{self.starts}",
                "--lease-duration=3",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        eventually(self.ready, 60, "extender /readyz")

    def ready(self) -> bool:
        """This start's process listens (its own log says so: a /readyz answer alone could
        come from another process that took the port while the old one was down) and is
        ready."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"extender exited:\n{self.log()[-3000:]}")
        if self.log().count("kubeacc extender listening on port") < self.starts:
            return False
        try:
            url = f"http://127.0.0.1:{self.probe_port}/readyz"
            with urllib.request.urlopen(url, timeout=5) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def state(self, node: str) -> dict[str, Any]:
        """The extender's /state view of ``node`` (over TLS, as kube-scheduler)."""
        with urllib.request.urlopen(
            f"{self.url}/state?node={node}", timeout=5, context=self.tls
        ) as r:
            return dict(json.loads(r.read()).get("node") or {})

    def counts(self) -> dict[str, Any]:
        """The extender's whole /state (counts of nodes, pods and calls)."""
        with urllib.request.urlopen(f"{self.url}/state", timeout=5, context=self.tls) as r:
            return dict(json.loads(r.read()))

    def holders(self, node: str) -> list[Any]:
        """The pods the extender counts on ``node``."""
        return list(self.state(node).get("holders") or [])

    def post(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.url}/{verb}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(req, timeout=30, context=self.tls) as r:
            return dict(json.loads(r.read()))


def scheduler_side(
    workdir: Path, managed: Sequence[str] = MANAGED, weight: int = 1
) -> tuple[int, ExtenderPKI, list[dict[str, Any]]]:
    """The extender's port and PKI (under ``workdir``), and kube-scheduler's ``extenders``
    entry calling it there over mutual TLS (``Testbed.start(scheduler_extenders=...)``)."""
    port = free_port()
    pki = issue_extender_pki(workdir / "extender-pki")
    tls = SchedulerTLS(pki.client.cert, pki.client.key, pki.ca)
    return (
        port,
        pki,
        [scheduler_entry(f"https://127.0.0.1:{port}", managed, weight=weight, tls=tls)],
    )


def start_lifecycle(
    kubeconfig: Path, node: str, host: Path, work: Path, stop: threading.Event
) -> threading.Thread:
    """The node's life-cycle agent as a thread (it publishes the Accelerators the extender
    reads), until ``stop`` is set."""
    lifecycle = LifecycleAgent(
        Client(KubeConfig.from_file(kubeconfig)),
        node_name=node,
        host=SyntheticHost(host, kernel=SyntheticKernel(host)),
        bitstream_dir=work,
        interval=1.0,
    )
    thread = threading.Thread(target=lifecycle.run, args=(stop,), daemon=True)
    thread.start()
    return thread


def extender_kubeconfig(tb: Testbed, client: Client, tmp: Path) -> Path:
    """A kubeconfig with a token of kube-system/kubeacc-extender (deploy/extender.yaml)."""
    apply_manifest(client, "rbac/extender.yaml")
    for doc in manifests("extender.yaml"):
        if doc["kind"] == "ServiceAccount":
            client.apply(from_dict(doc), field_manager="kubeacc", force=True)
    token_client(tb, tmp, namespace="kube-system", account="kubeacc-extender")
    return tmp / f"{_stem('kube-system', 'kubeacc-extender', '', '')}.kubeconfig"


@dataclass
class Cluster:
    testbed: Testbed
    client: Client
    extender: Extender
    agents: list[AgentProcess] = field(default_factory=list)


@contextlib.contextmanager
def extender_cluster(
    tmp: Path,
    request: pytest.FixtureRequest,
    *,
    plugin_nodes: Mapping[str, str],
    dp_config: str,
    gpus: int,
    namespace: str,
    dra_nodes: Mapping[str, str] | None = None,
    weight: int = 1,
    managed: Sequence[str] = MANAGED,
) -> Iterator[Cluster]:
    """Nodes ``plugin_nodes`` (name -> synthetic profile) serve GPUs through the device plugin
    with ``dp_config``, ``dra_nodes`` everything through DRA; ``gpus``: the GPU Accelerators
    the plugin nodes publish. Kept on failure (the path is printed)."""
    # a short path of our own (unix sockets), kept when a test fails: logs for the report
    workdir = Path(tempfile.mkdtemp(prefix="kacc-ext-"))
    port, pki, extenders = scheduler_side(workdir, managed, weight)
    dra = dict(dra_nodes or {})
    tb = Testbed.start(
        workdir,
        nodes=[KubeletOptions(node_name=n) for n in [*plugin_nodes, *dra]],
        scheduler_extenders=extenders,
    )
    failed = request.session.testsfailed
    agents: list[AgentProcess] = []
    threads: list[threading.Thread] = []
    stop = threading.Event()
    extender: Extender | None = None
    try:
        client = tb.client(field_manager="kubeacc-test")
        install_crds(client)
        install_agent_access(client)
        if dra:
            apply_device_classes(client)
        config = tmp / "dp.yaml"
        config.write_text(dp_config)
        for node, profile in [*plugin_nodes.items(), *dra.items()]:
            work = tmp / node
            work.mkdir()
            host = profiles.build(profile, work / "host", seed=node)
            kubeconfig = agent_kubeconfig(tb, node, work)
            agent = AgentProcess(node, host, kubeconfig, tb.node(node).root_dir, work)
            agents.append(agent)
            if node in dra:
                agent.start(apply_classes=False)
                continue
            agent.start(extra=[f"--device-plugin-config={config}"], apply_classes=False)
            # the life-cycle agent publishes the node's Accelerators: the extender's inventory
            threads.append(start_lifecycle(kubeconfig, node, host, work, stop))
        for agent in agents:
            agent.wait_registered(120)
        eventually(
            lambda: (
                sum(
                    (as_dict(a).get("status") or {}).get("device", {}).get("type") == "gpu"
                    for a in client.list(Accelerator)
                )
                == gpus
            ),
            120,
            "GPU Accelerators",
        )
        extender = Extender(extender_kubeconfig(tb, client, tmp), port, tmp / "extender.log", pki)
        extender.start()
        with contextlib.suppress(ApiError):
            client.create(
                from_dict(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                )
            )
        tb.wait_service_account(namespace)
        yield Cluster(tb, client, extender, agents)
    except BaseException:
        tb.keep = True
        raise
    finally:
        if extender is not None:
            extender.stop()
        for agent in agents:
            agent.stop()
        stop.set()
        for t in threads:
            t.join(10)
        tb.stop()
        if request.session.testsfailed == failed:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"\nextender testbed kept in {workdir}, extender log {tmp / 'extender.log'}")


def limits_pod(
    name: str,
    namespace: str,
    limits: dict[str, str],
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> Any:
    """A pause pod whose one container has ``limits`` (the extender's resources)."""
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": limits},
                    }
                ],
                **spec,
            },
        }
    )
