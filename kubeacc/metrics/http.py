"""One small HTTP port per component: ``/metrics``, ``/healthz`` and ``/readyz``.

``/healthz`` answers whether the process still works (its threads are alive), ``/readyz``
whether it does its job yet (for example: registered with the kubelet and slices published).
Both answer ``200 ok`` or ``503`` with the reasons, one per line, as the kubelet's probes and
people reading them expect.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

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
    """Serves a registry and two checks on ``address`` from a daemon thread."""

    def __init__(
        self,
        address: str,
        registry: CollectorRegistry,
        *,
        healthy: Check = list,
        ready: Check = list,
    ) -> None:
        host, port = parse_address(address)
        handler = _handler(registry, healthy, ready)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise MetricsAddressError(f"cannot listen on {address}: {exc.strerror}") from None
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )
        self._thread.start()
        log.info("metrics, /healthz and /readyz on port %d", self.port)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()


def _handler(
    registry: CollectorRegistry, healthy: Check, ready: Check
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
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
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would flood the log

    return Handler
