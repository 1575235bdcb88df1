"""Mutual TLS: only clients with a certificate from the client CA are served; the handshake
has a deadline; renewed files are picked up."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.netserve import tls as tlsmod
from kubeacc.netserve.limits import Limits
from kubeacc.netserve.server import BoundedHTTPServer
from kubeacc.netserve.tls import ReloadingContext, TLSConfigError, TLSFiles, server_context
from kubeacc.testbed.certs import CertificateAuthority
from kubeacc.testbed.extendertls import ExtenderPKI, issue_extender_pki
from tests.testbed.helpers import eventually

from .test_server import Echo

LIMITS = Limits(max_connections=4, handshake_timeout=0.6, max_body=100)


@pytest.fixture
def pki(tmp_path: Path) -> ExtenderPKI:
    return issue_extender_pki(tmp_path / "pki")


@pytest.fixture
def server(pki: ExtenderPKI) -> Iterator[BoundedHTTPServer]:
    s = BoundedHTTPServer(
        ("127.0.0.1", 0), Echo, LIMITS, tls=ReloadingContext(pki.server_files), name="tls"
    )
    s.start()
    yield s
    s.stop()


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def get(server: BoundedHTTPServer, ctx: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=5)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_schedulers_certificate_is_served(server: BoundedHTTPServer, pki: ExtenderPKI) -> None:
    assert get(server, client_context(pki.ca, pki.client.cert, pki.client.key)) == 200


def test_no_client_certificate_no_answer(server: BoundedHTTPServer, pki: ExtenderPKI) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        get(server, client_context(pki.ca))
    # The client sees the refusal before the server's thread has counted it.
    eventually(lambda: server.counts.get("handshake_failed", 0) >= 1, 10, "the refusal counted")


def test_a_certificate_from_another_ca_no_answer(
    server: BoundedHTTPServer, pki: ExtenderPKI, tmp_path: Path
) -> None:
    other = CertificateAuthority(tmp_path / "other", name="other-ca")
    stranger = other.issue("stranger", "kube-scheduler", client=True)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        get(server, client_context(pki.ca, stranger.cert, stranger.key))


def test_plain_http_on_the_tls_port_no_answer(server: BoundedHTTPServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"POST /bind HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        s.settimeout(3)
        reply = b""
        try:
            while chunk := s.recv(4096):
                reply += chunk
        except OSError:
            pass
        assert b"HTTP/1.1 200" not in reply


def test_a_stalled_handshake_is_cut_off(server: BoundedHTTPServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        start = time.monotonic()
        s.settimeout(3)
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(1) == b""
        assert time.monotonic() - start < 2


def test_renewed_files_are_picked_up(
    pki: ExtenderPKI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tlsmod, "RECHECK", 0.0)
    reloading = ReloadingContext(pki.server_files)
    first = reloading()
    renewed = issue_extender_pki(tmp_path / "renewed")
    for new, old in [
        (renewed.server.cert, pki.server.cert),
        (renewed.server.key, pki.server.key),
        (renewed.ca, pki.ca),
    ]:
        os.replace(new, old)
    assert reloading() is not first


def test_unusable_files_are_one_clear_error(pki: ExtenderPKI, tmp_path: Path) -> None:
    missing = tmp_path / "nope.crt"
    with pytest.raises(TLSConfigError, match=r"nope\.crt"):
        server_context(TLSFiles(missing, pki.server.key, pki.ca))
    with pytest.raises(TLSConfigError, match="client CA"):
        server_context(TLSFiles(pki.server.cert, pki.server.key, pki.server.key))
