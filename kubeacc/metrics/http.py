"""One small HTTP port per component: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers whether the process still works (its threads are alive), ``/readyz``
whether it does its job yet (for example: registered with the kubelet and slices published).
Both answer ``200 ok`` or ``503`` with the reasons, one per line, as the kubelet's probes and
people reading them expect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kubeacc.netserve.limits import PROBE_LIMITS, Limits
from kubeacc.netserve.server import BoundedHandler, BoundedHTTPServer

log = logging.getLogger(__name__)

#: A check: the reasons it fails (empty: passes).
Check = Callable[[], list[str]]


class MetricsAddressError(ValueError):
    """The ``--metrics-address`` cannot be used (malformed, or the port is taken)."""


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` (every interface) as a (host, port) pair."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsAddressError(f"metrics address {address!r} is not HOST:PORT or :PORT")
    return host.strip("[]"), int(port)


class ProbeServer:
    """Serves a registry and two checks on ``address`` from a daemon thread.

    Bounded as every kube-acc port is (:mod:`kubeacc.netserve`, ``PROBE_LIMITS``): a client
    holding idle or half-sent connections is cut off, and past the connection cap new ones are
    refused at once, so the port can cost the process neither threads nor file descriptors
    beyond ``max_connections``.
    """

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        *,
        healthy: Check = list,
        ready: Check = list,
        limits: Limits = PROBE_LIMITS,
    ) -> None:
        host, port = parse_address(address)
        handler = _handler(registry, healthy, ready)
        try:
            self._server = BoundedHTTPServer((host, port), handler, limits, name="metrics-http")
        except OSError as exc:
            raise MetricsAddressError(f"cannot listen on {address}: {exc.strerror}") from None

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def counts(self) -> dict[str, int]:
        """Connections refused or cut off, by reason (for tests and people)."""
        return {**self._server.counts, "reaped": self._server.reaper.reaped}

    def start(self) -> None:
        self._server.start()
        log.info("metrics, /healthz and /readyz on port %d", self.port)

    def stop(self) -> None:
        self._server.stop()


def _handler(registry: CollectorRegistry, healthy: Check, ready: Check) -> type[BoundedHandler]:
    class Handler(BoundedHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/livez"):
                self._check(healthy)
            elif path == "/readyz":
                self._check(ready)
            else:
                self._send(404, b"not found\n")

        def _check(self, check: Check) -> None:
            try:
                failing = check()
            except Exception as exc:  # a broken check is a failing one, never a 500 loop
                failing = [f"check failed: {exc}"]
            if failing:
                self._send(503, "".join(f"{r}\n" for r in failing).encode())
            else:
                self._send(200, b"ok\n")

        def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
            self.send_body(code, body, ctype)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would flood the log

    return Handler
