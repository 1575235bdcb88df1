"""The extender's port under hostile input: TLS only, sizes, nesting, shapes, budget."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kubeacc.contracts.wants import MEMORY
from kubeacc.extender.server import MAX_BODY, MAX_DEPTH, ExtenderServer, decode_args, too_deep
from kubeacc.extender.service import Extender
from kubeacc.netserve.tls import ReloadingContext
from kubeacc.testbed.extendertls import ExtenderPKI, issue_extender_pki
from tests.extender.helpers import pod, small_gpu, state_with

A = "0000:01:00.0"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ExtenderPKI:
    return issue_extender_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def server(pki: ExtenderPKI) -> Iterator[ExtenderServer]:
    ext = Extender(state_with({"big": [small_gpu(A, 20000)]}))
    s = ExtenderServer(ext, "127.0.0.1", 0, tls=ReloadingContext(pki.server_files))
    s.start()
    yield s
    s.stop()


def scheduler_tls(pki: ExtenderPKI) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(pki.client.cert, pki.client.key)
    return ctx


def post(
    server: ExtenderServer, pki: ExtenderPKI, path: str, body: bytes, **headers: str
) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=scheduler_tls(pki), timeout=10
    )
    try:
        conn.putrequest("POST", path)
        hdrs = {"Content-Length": str(len(body)), **headers}
        for k, v in hdrs.items():
            if v:
                conn.putheader(k, v)
        conn.endheaders()
        conn.send(body)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


FILTER = json.dumps({"Pod": pod("p", {MEMORY: "100"}), "NodeNames": ["big"]}).encode()


def test_the_scheduler_is_served(server: ExtenderServer, pki: ExtenderPKI) -> None:
    code, out = post(server, pki, "/filter", FILTER)
    assert code == 200 and out["NodeNames"] == ["big"]


def test_without_the_schedulers_certificate_bind_is_unreachable(
    server: ExtenderServer, pki: ExtenderPKI
) -> None:
    ctx = ssl.create_default_context(cafile=str(pki.ca))  # trusts the server, no client cert
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
    body = b'{"PodName": "victim", "PodNamespace": "other", "Node": "big"}'
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn.request("POST", "/bind", body)
        conn.getresponse().read()
    conn.close()


@pytest.mark.parametrize(
    ("length", "code", "reason"),
    [
        ("-1", 400, "non-negative"),
        ("", 400, "exactly one Content-Length"),
        (str(MAX_BODY + 1), 413, "over this port's"),
        (str(63 << 20), 413, "over this port's"),
    ],
)
def test_content_length_is_checked_before_reading(
    server: ExtenderServer, pki: ExtenderPKI, length: str, code: int, reason: str
) -> None:
    start = time.monotonic()
    got, out = post(server, pki, "/filter", b"", **{"Content-Length": length})
    assert got == code and reason in out["Error"]
    assert time.monotonic() - start < 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
        (b'{"Pod": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}", "nested deeper"),
        (b"\x00\xff binary", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"Pod": [1]}', "$.Pod"),
        (b'{"Pod": {}, "NodeNames": "big"}', "$.NodeNames"),
        (b'{"Pod": {"metadata": {"annotations": {"a": 1}}}}', "$.Pod.metadata.annotations"),
        (b'{"Pod": {"spec": {"containers": [{"resources": []}]}}}', "resources"),
    ],
)
def test_hostile_bodies_are_400_with_the_reason(
    server: ExtenderServer, pki: ExtenderPKI, body: bytes, reason: str
) -> None:
    code, out = post(server, pki, "/filter", body)
    assert code == 400 and reason in out["Error"]
    # and the port still serves
    assert post(server, pki, "/filter", FILTER)[0] == 200


def test_bind_args_of_the_wrong_shape_are_400(server: ExtenderServer, pki: ExtenderPKI) -> None:
    code, out = post(server, pki, "/bind", b'{"PodName": ["x"], "Node": "big"}')
    assert code == 400 and "$.PodName" in out["Error"]


def test_depth_walk_is_iterative_and_exact() -> None:
    nested: Any = "x"
    for _ in range(MAX_DEPTH - 1):
        nested = {"a": nested}
    assert not too_deep({"a": nested}) and too_deep({"a": {"b": nested}})
    assert decode_args("filter", json.dumps({"NodeNames": ["n"] * 5000}).encode())


def test_the_body_budget_refuses_what_would_not_fit(pki: ExtenderPKI) -> None:
    """With room for one body, a second large body waits, then gets 503, while the first
    is still being sent; the port then serves again."""
    ext = Extender(state_with({"big": [small_gpu(A, 20000)]}))
    s = ExtenderServer(
        ext, "127.0.0.1", 0, tls=ReloadingContext(pki.server_files), body_budget=1 << 20
    )
    s.start()
    try:
        raw = socket.create_connection(("127.0.0.1", s.port))
        held = scheduler_tls(pki).wrap_socket(raw, server_hostname="127.0.0.1")
        held.sendall(b"POST /filter HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n{")
        time.sleep(0.3)
        result: list[int] = []
        t = threading.Thread(
            target=lambda: result.append(post(s, pki, "/filter", b"{" + b" " * 600_000 + b"}")[0])
        )
        t.start()
        t.join(30)
        assert result == [503]
        held.close()
        assert post(s, pki, "/filter", FILTER)[0] == 200
    finally:
        s.stop()
