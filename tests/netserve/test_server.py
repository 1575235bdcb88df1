"""The bounded server against misbehaving clients: caps, deadlines, head and body limits."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from kubeacc.netserve.limits import Limits
from kubeacc.netserve.server import BodyError, BoundedHandler, BoundedHTTPServer

#: Set to let /slow requests finish.
RELEASE = threading.Event()
#: Paths the handler was asked for, in order.
SERVED: list[str] = []


class Echo(BoundedHandler):
    def do_GET(self) -> None:
        SERVED.append(self.path)
        if self.path == "/slow":
            RELEASE.wait(10)
        self.send_body(200, b"ok\n", "text/plain")

    def do_POST(self) -> None:
        try:
            body = self.read_body(self.body_length())
        except BodyError as err:
            self.close_connection = True
            self.send_body(err.code, f"{err}\n".encode(), "text/plain")
            return
        self.send_body(200, body, "application/octet-stream")


LIMITS = Limits(
    max_connections=4,
    keepalive_timeout=1.0,
    head_timeout=0.6,
    body_timeout=0.6,
    max_head=1024,
    max_body=100,
)


@pytest.fixture
def server() -> Iterator[BoundedHTTPServer]:
    s = BoundedHTTPServer(("127.0.0.1", 0), Echo, LIMITS, name="test-http")
    s.start()
    yield s
    s.stop()


def connect(server: BoundedHTTPServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def exchange(server: BoundedHTTPServer, request: bytes) -> bytes:
    with connect(server) as s:
        s.sendall(request)
        return recv_all(s)


def recv_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
        if b"\r\n\r\n" in out and out.split(b"\r\n\r\n", 1)[1].endswith(b"\n"):
            break
    return out


def status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply else 0


def closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def test_get_and_post(server: BoundedHTTPServer) -> None:
    assert status(exchange(server, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")) == 200
    reply = exchange(server, b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
    assert status(reply) == 200 and reply.endswith(b"hello")


@pytest.mark.parametrize(
    ("headers", "code", "reason"),
    [
        (b"Content-Length: -1\r\n", 400, b"not a non-negative integer"),
        (b"Content-Length: 1e3\r\n", 400, b"not a non-negative integer"),
        (b"", 400, b"exactly one Content-Length"),
        (b"Content-Length: 3\r\nContent-Length: 3\r\n", 400, b"exactly one"),
        (b"Content-Length: 101\r\n", 413, b"over this port's 100 bytes"),
        (b"Content-Length: 99999999999999999999\r\n", 413, b"over"),
        (b"Transfer-Encoding: chunked\r\n", 400, b"Transfer-Encoding"),
    ],
)
def test_bad_content_length_is_answered_at_once(
    server: BoundedHTTPServer, headers: bytes, code: int, reason: bytes
) -> None:
    start = time.monotonic()
    reply = exchange(server, b"POST / HTTP/1.1\r\n" + headers + b"\r\n")
    assert status(reply) == code and reason in reply
    assert time.monotonic() - start < 0.5


def test_a_short_body_is_cut_off_at_its_deadline(server: BoundedHTTPServer) -> None:
    with connect(server) as s:
        s.sendall(b"POST / HTTP/1.1\r\nContent-Length: 50\r\n\r\nabc")
        start = time.monotonic()
        assert closed_within(s, 3)
        assert time.monotonic() - start < 2


def test_slowloris_is_cut_off_at_the_head_deadline(server: BoundedHTTPServer) -> None:
    with connect(server) as s:
        s.sendall(b"GET / HTTP/1.1\r\n")
        start = time.monotonic()
        try:
            for _ in range(20):  # a header byte every 0.2 s: every recv is quick
                s.sendall(b"X")
                time.sleep(0.2)
        except OSError:
            pass
        assert closed_within(s, 3)
        assert time.monotonic() - start < 2.5


@pytest.mark.parametrize(
    "torso",
    [b"GET /cut HTTP/1.1\r\nX-Slow: ", b"GET /cut HTTP/1.1\r\nHost: x\r\n", b"GET /cut HTT"],
)
def test_a_head_cut_off_is_not_served(server: BoundedHTTPServer, torso: bytes) -> None:
    """A head without its blank line is no request, whether the client half-closes or the
    head deadline cuts it: nothing is answered and the handler never runs."""
    SERVED.clear()
    with connect(server) as s:
        s.sendall(torso)
        s.shutdown(socket.SHUT_WR)
        assert recv_all(s) == b""
    with connect(server) as s:
        s.sendall(torso)
        assert closed_within(s, 3)  # the head deadline
        s.settimeout(1)
        assert s.recv(100) == b""
    assert status(exchange(server, b"GET / HTTP/1.1\r\n\r\n")) == 200
    assert SERVED == ["/"]
    # counted by the server's thread after it closed: the client may see the close first
    deadline = time.monotonic() + 5
    while server.counts["head_cut"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.counts["head_cut"] == 2


def test_idle_connections_are_closed_at_the_keepalive_deadline(
    server: BoundedHTTPServer,
) -> None:
    with connect(server) as s:
        start = time.monotonic()
        assert closed_within(s, 3)
        assert 0.8 < time.monotonic() - start < 2


def test_a_head_over_the_cap_is_431(server: BoundedHTTPServer) -> None:
    reply = exchange(server, b"GET / HTTP/1.1\r\n" + b"X-A: " + b"a" * 2000 + b"\r\n\r\n")
    assert status(reply) in (400, 431)
    reply = exchange(server, b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n")
    assert status(reply) == 431


def test_idle_connections_make_room_for_a_request(server: BoundedHTTPServer) -> None:
    """The port full of idle connections: a newcomer takes the longest-waiting one's place."""
    idle = [connect(server) for _ in range(LIMITS.max_connections)]
    time.sleep(0.2)
    try:
        for _ in range(3):
            assert status(exchange(server, b"GET / HTTP/1.1\r\n\r\n")) == 200
        assert server.counts["evicted_waiting"] >= 1
        assert closed_within(idle[0], 1)  # the oldest went first
    finally:
        for s in idle:
            s.close()


def test_when_every_connection_is_at_work_newcomers_are_refused(
    server: BoundedHTTPServer,
) -> None:
    RELEASE.clear()
    busy = [connect(server) for _ in range(LIMITS.max_connections)]
    try:
        for s in busy:
            s.sendall(b"GET /slow HTTP/1.1\r\n\r\n")
        time.sleep(0.3)
        assert status(exchange(server, b"GET / HTTP/1.1\r\n\r\n")) == 503
        assert server.counts["refused_busy"] >= 1
    finally:
        RELEASE.set()
        for s in busy:
            s.close()
    time.sleep(0.3)
    assert status(exchange(server, b"GET / HTTP/1.1\r\n\r\n")) == 200


def test_held_connections_cost_no_more_than_the_cap(server: BoundedHTTPServer) -> None:
    """200 idle connections: the server holds descriptors for at most the cap of them."""
    import os

    before = len(os.listdir("/proc/self/fd"))
    held = []
    try:
        for _ in range(200):
            held.append(connect(server))
        deadline = time.monotonic() + 10
        while server.reaper.evicted < 200 - LIMITS.max_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.reaper.evicted >= 200 - LIMITS.max_connections
        server_side = len(os.listdir("/proc/self/fd")) - before - len(held)
        assert server_side <= LIMITS.max_connections + 1
        assert status(exchange(server, b"GET / HTTP/1.1\r\n\r\n")) == 200
    finally:
        for s in held:
            s.close()
