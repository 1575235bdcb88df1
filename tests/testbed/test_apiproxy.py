"""The testbed's stand-in for kube-proxy: a listener inside a network namespace that forwards
to a server on the machine's loopback, bytes unchanged."""

from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.testbed.apiproxy import READY
from kubeacc.testbed.procs import Process, free_port, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"kubeacc-t{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "-n", name, "addr", "add", "10.0.0.1/32", "dev", "lo"], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_proxy_serves_inside_the_namespace_only(netns: str, tmp_path: Path) -> None:
    payload = os.urandom(3 << 20)
    (tmp_path / "blob").write_bytes(payload)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    proxy = Process(
        "apiproxy",
        [
            sys.executable,
            "-m",
            "kubeacc.testbed.apiproxy",
            f"--netns=/run/netns/{netns}",
            f"--listen=10.0.0.1:{port}",
            f"--upstream=127.0.0.1:{server.server_address[1]}",
        ],
        tmp_path / "apiproxy.log",
    ).start()
    try:
        wait_for("proxy", lambda: READY in proxy.tail(5), 30, [proxy])
        fetch = (
            "import sys, urllib.request; sys.stdout.buffer.write("
            f"urllib.request.urlopen('http://10.0.0.1:{port}/blob', timeout=30).read())"
        )
        inside = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-c", fetch],
            capture_output=True,
            check=False,
            timeout=60,
        )
        assert inside.returncode == 0, inside.stderr
        assert hashlib.sha256(inside.stdout).digest() == hashlib.sha256(payload).digest()
        # On the machine nothing listens on that port.
        listening = Path("/proc/net/tcp").read_text()
        assert f":{port:04X} " not in listening
    finally:
        proxy.stop()
        server.shutdown()


def test_proxy_refuses_a_namespace_that_does_not_exist(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeacc.testbed.apiproxy",
            f"--netns={tmp_path / 'missing'}",
            "--listen=10.0.0.1:443",
            "--upstream=127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode != 0
    assert "missing" in done.stderr
