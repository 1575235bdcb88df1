"""The agent's gRPC runtime (grpclib on one loop thread), called through grpcio as a kubelet."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kubeacc.agent.registration import RegistrationServer
from kubeacc.node.kubeletapi import pluginregistration_v1_pb2 as rpb
from kubeacc.node.rpc import Changes, _CoalescingTransport, rpc_loop
from tests.kubeletclient import pluginregistration_v1_pb2_grpc as rpb_grpc


@pytest.fixture
def sockdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rpc-", dir="/tmp") as d:  # sun_path <= 107 bytes
        yield Path(d)


def test_a_bump_from_a_thread_wakes_a_waiting_coroutine() -> None:
    changes = Changes()

    async def waiter() -> list[int | None]:
        got = [await changes.wait(-1)]  # a version it has not seen: at once
        got.append(await changes.wait(0))  # blocks until the bump below
        got.append(await changes.wait(1))  # blocks until close
        return got

    future = asyncio.run_coroutine_threadsafe(waiter(), rpc_loop().loop)
    time.sleep(0.1)
    assert not future.done()
    threading.Thread(target=changes.bump).start()
    time.sleep(0.1)
    assert not future.done()
    changes.close()
    assert future.result(5) == [0, 1, None]


def test_run_refuses_the_loop_thread_itself() -> None:
    rpc = rpc_loop()

    async def nested() -> None:
        async def inner() -> None:
            return None

        rpc.run(inner())

    with pytest.raises(RuntimeError, match="own thread"):
        rpc.run(nested(), timeout=5)


def test_registration_socket_answers_and_records_the_kubelet_verdict(sockdir: Path) -> None:
    seen: list[bool] = []
    server = RegistrationServer(
        sockdir,
        "DRAPlugin",
        "kubeacc.io",
        sockdir / "dra.sock",
        ["v1.DRAPlugin"],
        on_registered=lambda: seen.append(True),
    )
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{server.socket_path}") as ch:
            stub = rpb_grpc.RegistrationStub(ch)
            info = stub.GetInfo(rpb.InfoRequest(), timeout=5)
            assert (info.type, info.name) == ("DRAPlugin", "kubeacc.io")
            stub.NotifyRegistrationStatus(
                rpb.RegistrationStatus(plugin_registered=False, error="version"), timeout=5
            )
            assert not server.registered.is_set()
            assert server.servicer.last_error == "version"
            stub.NotifyRegistrationStatus(rpb.RegistrationStatus(plugin_registered=True), timeout=5)
            assert server.registered.is_set()
            assert seen == [True]
            # a method the socket does not serve is refused the gRPC way
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary("/pluginregistration.Registration/Nope")(b"", timeout=5)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop()
    assert not server.socket_path.exists()


def test_a_stale_socket_file_is_replaced(sockdir: Path) -> None:
    stale = sockdir / "kubeacc.io-reg.sock"
    stale.write_text("left over by a crashed agent")
    server = RegistrationServer(sockdir, "DRAPlugin", "kubeacc.io", sockdir / "x", ["v1.DRAPlugin"])
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{stale}") as ch:
            info = rpb_grpc.RegistrationStub(ch).GetInfo(rpb.InfoRequest(), timeout=5)
        assert info.name == "kubeacc.io"
    finally:
        server.stop()


def test_the_agent_process_does_not_load_grpcio() -> None:
    """grpcio's core keeps ~17 MB resident; the agent's memory budget is 60 MB (DESIGN.md)."""
    code = (
        "import sys; import kubeacc.cli.agent, kubeacc.agent.runner, "
        "kubeacc.deviceplugin.manager; print(sorted(m for m in sys.modules "
        "if m == 'grpc' or m.startswith('grpc.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _Counted:
    """A real socket transport, with its writes counted."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()


def test_the_writes_of_one_loop_turn_leave_as_one_and_close_sends_what_is_kept() -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], bytes]:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        counted = _Counted(transport)  # type: ignore[arg-type]
        out = _CoalescingTransport(counted, loop)  # type: ignore[arg-type]
        for part in (b"headers|", b"message|", b"trailers|"):  # one answer, one turn
            out.write(part)
        assert counted.writes == []  # kept until the turn ends
        await asyncio.sleep(0)
        first = list(counted.writes)
        out.write(b"last|")
        out.close()  # sends what is kept, then closes
        await asyncio.sleep(0.05)
        theirs.setblocking(False)
        got = b""
        while chunk := theirs.recv(4096):
            got += chunk
        theirs.close()
        return first, counted.writes, got

    first, writes, got = asyncio.run(scenario())
    assert first == [b"headers|message|trailers|"]
    assert writes == [b"headers|message|trailers|", b"last|"]
    assert got == b"headers|message|trailers|last|"
