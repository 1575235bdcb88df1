"""HTTP front of the extender (stdlib ``ThreadingHTTPServer``).

``POST /filter``, ``/prioritize``, ``/bind`` (the verbs of the KubeSchedulerConfiguration);
``GET /healthz`` (process alive), ``/readyz`` (leading and the watches synced; a Service
therefore routes the scheduler to the leader only), ``/state`` (counts, for people;
``/state?node=N``: node N's GPUs, their use and the pods holding them).
A replica that does not lead answers the verbs with 503.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from kubeacc.extender.service import Extender

log = logging.getLogger(__name__)
MAX_BODY = 64 << 20

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class ExtenderServer:
    def __init__(
        self,
        extender: Extender,
        host: str,
        port: int,
        ready: Callable[[], list[str]] = list,
        serving: Callable[[], bool] = lambda: True,
    ) -> None:
        self.extender = extender
        self.ready = ready
        self.serving = serving
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: with Nagle's algorithm on, the
            # client's delayed ACK would add ~40 ms to every answer.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s " + format, self.address_string(), *args)

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._send(200, b"ok\n", "text/plain")
                elif path == "/readyz":
                    problems = outer.ready()
                    text = "\n".join(problems) + "\n" if problems else "ok\n"
                    self._send(503 if problems else 200, text.encode(), "text/plain")
                elif path == "/state":
                    query = self.path.partition("?")[2]
                    node = query.removeprefix("node=") if query.startswith("node=") else None
                    data = {**outer.extender.state.summary(node), **outer.extender.counts}
                    self._send(200, json.dumps(data).encode())
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:
                verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                handler = {
                    "filter": outer.extender.filter,
                    "prioritize": outer.extender.prioritize_json,
                    "bind": outer.extender.bind,
                }.get(verb)
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self._send(413, b'{"Error": "request too large"}')
                    self.close_connection = True
                    return
                raw = self.rfile.read(length)
                if handler is None:
                    self._send(404, b'{"Error": "unknown verb"}')
                    return
                if not outer.serving():
                    self._send(503, b'{"Error": "this kubeacc extender replica does not lead"}')
                    return
                try:
                    args = _decoder.decode(raw)
                    if not isinstance(args, dict):
                        raise ValueError("the body is not a JSON object")
                except (msgspec.DecodeError, ValueError) as err:
                    self._send(400, _encoder.encode({"Error": f"bad request: {err}"}))
                    return
                try:
                    result: Any = handler(args)
                except Exception as err:  # a bug: answer, log, keep serving
                    log.exception("%s failed", verb)
                    self._send(500, _encoder.encode({"Error": f"{verb}: internal error: {err}"}))
                    return
                self._send(200, result if isinstance(result, bytes) else _encoder.encode(result))

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="extender-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)
