"""One extender process: watches, leadership, HTTP; used by ``kubeacc extender`` and tests."""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable

from lightkube import Client

from kubeacc.crds.resources import Accelerator
from kubeacc.extender.kube import Inventory, KubeBinder, Leadership
from kubeacc.extender.server import ExtenderServer
from kubeacc.extender.service import Extender
from kubeacc.extender.state import State
from kubeacc.gcfreeze import freeze_periodically
from kubeacc.metrics.common import component_registry
from kubeacc.metrics.http import ProbeServer

log = logging.getLogger(__name__)


def check_api(client: Client) -> None:
    """One cheap read, so that a wrong kubeconfig or a missing CRD fails at start, clearly."""
    next(iter(client.list(Accelerator, chunk_size=1)), None)


class ExtenderRunner:
    def __init__(
        self,
        client: Client,
        host: str,
        port: int,
        *,
        identity: str,
        lease_namespace: str = "kube-system",
        leader_elect: bool = True,
        lease_duration: int = 15,
        tls: Callable[[], ssl.SSLContext] | None = None,
        probe_address: str | None = None,
    ) -> None:
        """``tls``: the verbs' port's TLS context (None: plain HTTP, local use only);
        ``probe_address``: a plain port for the kubelet's probes and /metrics, which cannot
        present the client certificate the verbs' port asks for."""
        self.state = State()
        self.inventory = Inventory(client, self.state)
        self.extender = Extender(self.state, KubeBinder(client))
        self.leadership = (
            Leadership(client, identity, lease_namespace, lease_duration) if leader_elect else None
        )
        self.server = ExtenderServer(
            self.extender, host, port, ready=self.not_ready, serving=self.serving, tls=tls
        )
        self.probes = (
            ProbeServer(probe_address, component_registry("extender"), ready=self.not_ready)
            if probe_address is not None
            else None
        )
        self._stop = threading.Event()

    def serving(self) -> bool:
        # Verbs before the first sync would decide on an empty view: refuse them.
        leads = self.leadership is None or self.leadership.leading.is_set()
        return leads and self.inventory.synced()

    def not_ready(self) -> list[str]:
        problems = self.inventory.not_ready()
        if self.leadership is not None and not self.leadership.leading.is_set():
            problems.append("not the leader")
        return problems

    def start(self) -> None:
        # Each filter call allocates thousands of small objects; the full collections they
        # trigger would walk the whole 5,000-node state (tens of ms, the p99 of a verb).
        freeze_periodically(self._stop, name="extender-gc-freeze")
        self.inventory.start()
        if self.leadership is not None:
            self.leadership.start()
        self.server.start()
        if self.probes is not None:
            self.probes.start()
        log.info(
            "kubeacc extender listening on port %d (%s)",
            self.server.port,
            "TLS, client certificates required" if self.server.httpd.tls else "plain HTTP",
        )

    def run(self, stop: threading.Event) -> None:
        self.start()
        try:
            stop.wait()
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        self.server.stop()
        if self.probes is not None:
            self.probes.stop()
        if self.leadership is not None:
            self.leadership.stop()
        self.inventory.close()
