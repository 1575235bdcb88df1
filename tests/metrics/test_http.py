"""The probe server: /metrics in Prometheus text format, checks as 200/503, address errors."""

from __future__ import annotations

import socket

import pytest
from prometheus_client import Counter

from kubeacc.metrics.common import component_registry
from kubeacc.metrics.http import MetricsAddressError, ProbeServer, parse_address
from kubeacc.testbed.procs import free_port

from .scrape import get, value


def test_serves_metrics_and_checks() -> None:
    registry = component_registry("test")
    hits = Counter("kubeacc_test_hits_total", "test", registry=registry)
    reasons: list[str] = ["not registered"]
    server = ProbeServer(f"127.0.0.1:{free_port()}", registry, ready=lambda: list(reasons))
    server.start()
    try:
        assert value(server.port, "kubeacc_test_hits_total") == 0
        hits.inc(3)
        assert value(server.port, "kubeacc_test_hits_total") == 3
        assert value(server.port, "kubeacc_build_info", component="test") == 1
        assert value(server.port, "process_resident_memory_bytes") > 0
        assert get(server.port, "/healthz") == (200, "ok\n")
        assert get(server.port, "/readyz") == (503, "not registered\n")
        reasons.clear()
        assert get(server.port, "/readyz") == (200, "ok\n")
        assert get(server.port, "/nothing")[0] == 404
    finally:
        server.stop()


def test_a_failing_check_is_a_503() -> None:
    def broken() -> list[str]:
        raise RuntimeError("boom")

    server = ProbeServer(f"127.0.0.1:{free_port()}", component_registry("t"), healthy=broken)
    server.start()
    try:
        assert get(server.port, "/healthz") == (503, "check failed: boom\n")
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [(":8080", "", 8080), ("127.0.0.1:9", "127.0.0.1", 9), ("[::1]:80", "::1", 80)],
)
def test_parse_address(address: str, host: str, port: int) -> None:
    assert parse_address(address) == (host, port)


@pytest.mark.parametrize("address", ["8080", "host:", ":http", ":70000", ""])
def test_bad_addresses_are_refused(address: str) -> None:
    with pytest.raises(MetricsAddressError, match="is not HOST:PORT or :PORT"):
        parse_address(address)


def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(MetricsAddressError, match=f"cannot listen on 127.0.0.1:{port}"):
            ProbeServer(f"127.0.0.1:{port}", component_registry("t"))
