"""The standard library's threading HTTP server with every resource a client can hold bounded.

- connections: at most ``Limits.max_connections`` at once; when the port is full, a newcomer
  takes the place of the connection that has waited longest without sending a request, and is
  refused (plain HTTP: a one-line 503) only when every connection is at work; so a flood of
  idle connections costs neither threads nor descriptors nor the probes' answers;
- time: each phase of a connection has a deadline (:mod:`kubeacc.netserve.reaper`), so idle
  or byte-dribbling clients (slowloris) are cut off;
- a head that ends before its blank line (the client half-closed, or the deadline or an
  eviction cut it off) is no request: the connection is closed unanswered, so a flood of
  cut-off slow clients costs no handler work (an answer to such a torso would be a full
  ``/metrics`` rendering per dropped connection);
- bytes: the request head is capped (431), the body's ``Content-Length`` is checked before a
  byte of it is read (missing, malformed or negative: 400; too large: 413; chunked: 400);
- TLS: the handshake runs in the connection's own thread under its deadline, never in the
  accept loop; with a client CA, a client without a certificate signed by it gets nothing.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubeacc.netserve.limits import Limits
from kubeacc.netserve.reaper import Reaper

log = logging.getLogger(__name__)

#: Seconds the accept loop waits for an evicted connection's thread to give its slot back.
EVICT_WAIT = 1.0


class BodyError(Exception):
    """A request body that is refused before it is read: ``code`` and a one-line reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class _HeadReader:
    """The connection's reader while a request head comes in: at most ``budget`` bytes, and
    the head's deadline starts with its first byte (before it, the keep-alive one runs)."""

    def __init__(self, raw: Any, budget: int, first_byte: Callable[[], None]) -> None:
        self._raw = raw
        self.budget = budget
        self.overflow = False
        #: A line of the head ended without its newline: end-of-file mid-head.
        self.cut = False
        self._first: Callable[[], None] | None = first_byte

    def readline(self, size: int = -1) -> bytes:
        if self._first is not None:
            self._raw.peek(1)
            self._first()
            self._first = None
        limit = self.budget if size < 0 else min(size, self.budget)
        if limit <= 0:
            self.overflow = True
            return b""
        line: bytes = self._raw.readline(limit)
        self.budget -= len(line)
        if not line.endswith(b"\n"):
            if self.budget <= 0:
                self.overflow = True
            elif len(line) < limit:
                self.cut = True  # readline stopped short of its limit: end-of-file
        return line

    def read(self, size: int = -1) -> bytes:  # not used for heads; present for the interface
        return bytes(self._raw.read(size))


class BoundedHandler(BaseHTTPRequestHandler):
    """Base of the handlers: deadlines, the head cap and :meth:`read_body`."""

    server: BoundedHTTPServer
    #: The head being built (http.server's own buffer; :meth:`send_body` adds the body).
    _headers_buffer: list[bytes]
    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes: with Nagle's algorithm on, the client's
    # delayed ACK would add ~40 ms to every answer
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self._raw_rfile = self.rfile
        self._head: _HeadReader | None = None

    def handle(self) -> None:
        limits = self.server.limits
        try:
            if isinstance(self.connection, ssl.SSLSocket):
                self._due(limits.handshake_timeout, waiting=True)
                try:
                    self.connection.do_handshake()
                except (ssl.SSLError, OSError) as err:
                    self.server.count("handshake_failed")
                    log.debug("%s: TLS handshake refused: %s", self.address_string(), err)
                    return
            super().handle()
        finally:
            self.server.reaper.forget(self.connection)

    def handle_one_request(self) -> None:
        limits = self.server.limits
        self._due(limits.keepalive_timeout, waiting=True)
        self._head = _HeadReader(
            self._raw_rfile, limits.max_head, lambda: self._due(limits.head_timeout, waiting=True)
        )
        self.rfile = self._head  # type: ignore[assignment]
        try:
            super().handle_one_request()
        except (OSError, ssl.SSLError) as err:  # the peer went, or the reaper cut it off
            log.debug("%s: %s", self.address_string(), err)
            self.close_connection = True
        finally:
            self.rfile = self._raw_rfile

    def parse_request(self) -> bool:
        head = self._head
        if head is not None and head.cut:  # the request line itself was cut off
            return self._unanswered()
        ok = super().parse_request()
        self._due(self.server.limits.work_timeout)
        if ok and head is not None and head.overflow:
            self.server.count("head_too_large")
            self.send_error(431, "request head too large")
            return False
        if head is not None and head.cut:
            return self._unanswered()
        return ok

    def _unanswered(self) -> bool:
        """End a connection whose head was cut off: nobody is left to read an answer."""
        self.server.count("head_cut")
        self.close_connection = True
        return False

    def _due(self, seconds: float, *, waiting: bool = False) -> None:
        self.server.reaper.due_in(self.connection, seconds, waiting=waiting)

    def body_length(self, limit: int | None = None) -> int:
        """The body's length from ``Content-Length``, checked: :class:`BodyError` else."""
        limit = self.server.limits.max_body if limit is None else limit
        if self.headers.get("Transfer-Encoding") is not None:
            raise BodyError(400, "Transfer-Encoding is not supported; send Content-Length")
        values = self.headers.get_all("Content-Length") or []
        if len(values) != 1:
            raise BodyError(400, "exactly one Content-Length header is required")
        text = values[0].strip()
        if not text.isdigit() or not text.isascii():
            raise BodyError(400, f"Content-Length {text[:20]!r} is not a non-negative integer")
        length = int(text)
        if length > limit:
            raise BodyError(413, f"body of {length} bytes is over this port's {limit} bytes")
        return length

    def read_body(self, length: int) -> bytes:
        """``length`` bytes of body under the body deadline; :class:`BodyError` when short."""
        self._due(self.server.limits.body_timeout)
        data = self._raw_rfile.read(length)
        self._due(self.server.limits.work_timeout)
        if len(data) != length:
            self.close_connection = True
            raise BodyError(400, f"body ended after {len(data)} of {length} bytes")
        return bytes(data)

    def send_body(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        if self.request_version == "HTTP/0.9":  # no head: the body alone
            self.end_headers()
            self.wfile.write(body)
            return
        # head and body in one write: one system call, and the client wakes once for the
        # whole answer instead of once for the head and again for the body
        self._headers_buffer.append(b"\r\n")
        self._headers_buffer.append(body)
        self.flush_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class BoundedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedHandler],
        limits: Limits,
        *,
        tls: Callable[[], ssl.SSLContext] | None = None,
        name: str = "http",
    ) -> None:
        self.limits = limits
        self.request_queue_size = limits.backlog
        self.tls = tls
        self.name = name
        self.reaper = Reaper()
        self._slots = threading.BoundedSemaphore(limits.max_connections)
        self._counts_lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        super().__init__(address, handler)

    def count(self, what: str) -> None:
        with self._counts_lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        if self.tls is not None:
            # the handshake happens in the connection's thread, under its deadline
            sock = self.tls().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not self._evict_for_one():
            self.count("refused_busy")
            if self.tls is None:
                _try_send(
                    request,
                    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n"
                    b"Content-Length: 0\r\n\r\n",
                )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def _evict_for_one(self) -> bool:
        """Make room by evicting the longest-waiting connection; True with a slot taken."""
        if not self.reaper.evict_oldest_waiting():
            return False
        self.count("evicted_waiting")
        return self._slots.acquire(timeout=EVICT_WAIT)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client's misbehaviour is not the server's traceback
        log.debug("%s: connection from %s failed", self.name, client_address, exc_info=True)

    def start(self) -> None:
        self.reaper.start(self.name)
        self._thread = threading.Thread(target=self.serve_forever, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(5)
        self.reaper.stop()
        self.server_close()


def _try_send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.settimeout(0)
        sock.send(data)
    except OSError:
        pass
