"""The agent's gRPC runtime: one asyncio loop on its own thread serves every kubelet socket.

The agent speaks gRPC with grpclib (pure Python, over the h2 HTTP/2 library) rather than grpcio:
grpcio's core library alone keeps about 17 MB resident, plus a thread pool per server, which
the node agent's memory budget (RSS <= 60 MB, DESIGN.md) cannot carry next to Python, pydantic
and the API client. The rest of the agent is threaded, so this module is the bridge:

- :class:`RpcLoop` runs the event loop; ordinary threads hand it coroutines with :meth:`run`.
- :class:`UnixServer` starts and stops a grpclib server on a unix socket from any thread.
- :class:`Changes` lets a thread that changed some state wake the streams (health,
  ListAndWatch) that are waiting on the loop.

The writes of one turn of the loop leave the socket together (:class:`_CoalescingTransport`).
Handlers are coroutines on the loop; blocking work (API reads, fsync) goes through
``asyncio.to_thread``, whose pool is bounded here, so one slow claim never stalls a socket.

Limits, as grpc's own servers set them (grpclib sets none): a request message is at most
:data:`MAX_RECEIVE` bytes and a larger declared length is refused from its 5-byte prefix,
before any of the body is buffered; a connection carries at most :data:`MAX_STREAMS` calls at
once; and a connection remembers only the last :data:`CLOSED_STREAM_RECORDS` closed streams
(h2 keeps 65,536 per connection, about 10 MB on the kubelet's one long-lived connection).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
from collections.abc import Collection, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.server import Server, Stream
from h2.settings import SettingCodes
from h2.utilities import SizeLimitDict

from kubeacc.node.sockets import check_socket_path

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Threads that run blocking handler work (to_thread); the kubelet prepares claims of one pod
#: in one call, so a few suffice.
WORKERS = 4
#: grpc's default maximum receive message size.
MAX_RECEIVE = 4 * 1024 * 1024
#: Concurrent calls per connection (the kubelet makes a handful: one stream, a few unary calls).
MAX_STREAMS = 16
#: Closed streams a connection remembers, to answer frames still in flight after a reset.
CLOSED_STREAM_RECORDS = 256


class RpcLoop:
    """An asyncio event loop on a daemon thread, shared by every gRPC server of the process."""

    def __init__(self, workers: int = WORKERS) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rpc-work")
        )
        self._thread = threading.Thread(target=self._run, name="rpc-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (from any other thread)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("RpcLoop.run called from the loop's own thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


_shared: list[RpcLoop] = []
_shared_lock = threading.Lock()


def rpc_loop() -> RpcLoop:
    """The process's loop, started on first use."""
    with _shared_lock:
        if not _shared:
            _shared.append(RpcLoop())
        return _shared[0]


class _CoalescingTransport:
    """A transport whose writes of one turn of the event loop leave as one ``send``.

    grpclib writes every HTTP/2 frame batch at once: an answer to a unary call is three writes
    (headers, message, trailers), three system calls and three wake-ups of the kubelet's
    reader. The handler makes all three without giving the loop a turn, so writes are kept
    here and sent together at the end of that turn (``call_soon``): one system call per answer.
    Closing sends what is kept first; everything else is the real transport's.
    """

    def __init__(self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._kept: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._kept:
            self._loop.call_soon(self.flush)
        self._kept.append(data)

    def flush(self) -> None:
        if not self._kept:
            return
        data = b"".join(self._kept)
        self._kept.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _LimitedProtocol(H2Protocol):
    """grpclib's HTTP/2 protocol with the per-connection limits of the module docstring,
    writing through :class:`_CoalescingTransport`."""

    def connection_made(self, transport: Any) -> None:
        transport = _CoalescingTransport(transport, asyncio.get_running_loop())
        super().connection_made(transport)
        h2 = self.connection._connection
        h2._closed_streams = SizeLimitDict(size_limit=CLOSED_STREAM_RECORDS)
        h2.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS})
        self.connection.flush()


class LimitedServer(Server):
    """A grpclib server whose connections carry :class:`_LimitedProtocol`'s limits."""

    def _protocol_factory(self) -> H2Protocol:
        plain = super()._protocol_factory()
        return _LimitedProtocol(plain.handler, plain.config, plain.h2_config)


class UnixServer:
    """A grpclib server on a unix socket; :meth:`start` replaces a stale socket file."""

    def __init__(self, handlers: Collection[Any], path: Path, *, mode: int | None = None) -> None:
        self.handlers = list(handlers)
        self.path = path
        self.mode = mode
        self._server: Server | None = None
        self._rpc = rpc_loop()

    def start(self) -> None:
        check_socket_path(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)

        async def start() -> Server:
            server = LimitedServer(self.handlers)
            await server.start(path=str(self.path))
            return server

        self._server = self._rpc.run(start(), timeout=10)
        if self.mode is not None:
            os.chmod(self.path, self.mode)

    def stop(self, grace: float = 1.0) -> None:
        """Stop listening, cancel running calls (streams end), remove the socket file."""
        server, self._server = self._server, None
        if server is not None:

            async def stop() -> None:
                server.close()
                try:
                    await asyncio.wait_for(server.wait_closed(), grace)
                except TimeoutError:
                    log.warning("gRPC calls on %s still running after %.1fs", self.path, grace)

            self._rpc.run(stop(), timeout=grace + 5)
        self.path.unlink(missing_ok=True)


class Changes:
    """A version number that threads bump and coroutines on the loop wait for.

    A stream remembers the version it last sent and awaits :meth:`wait`; it gets the new
    version as soon as it moved on (at once if it already had), or None once closed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._closed = False
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def bump(self) -> None:
        with self._lock:
            self._version += 1
            self._wake()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake()

    def _wake(self) -> None:
        for fut in self._waiters:
            fut.get_loop().call_soon_threadsafe(_resolve, fut)
        self._waiters.clear()

    async def wait(self, seen: int) -> int | None:
        while True:
            with self._lock:
                if self._closed:
                    return None
                if self._version != seen:
                    return self._version
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.add(fut)
            try:
                await fut
            finally:
                with self._lock:
                    self._waiters.discard(fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def received(stream: Stream[T, Any]) -> T:
    """The request message of a call, at most :data:`MAX_RECEIVE` bytes.

    grpclib's own ``recv_message`` buffers whatever length the client declares; this reads the
    5-byte gRPC message prefix first (through grpclib's stream internals) and refuses a
    compressed or oversized message with RESOURCE_EXHAUSTED before reading its body, as grpc
    does. A call that carries no message is refused too.
    """
    h2_stream = stream._stream
    prefix = await h2_stream.recv_data(5)
    if not prefix:
        raise GRPCError(Status.INVALID_ARGUMENT, "the call carried no request message")
    if len(prefix) != 5:
        raise GRPCError(Status.INVALID_ARGUMENT, "the request message was cut short")
    compressed, length = struct.unpack(">?I", prefix)
    if compressed:
        raise GRPCError(Status.UNIMPLEMENTED, "compressed request messages are not accepted")
    if length > MAX_RECEIVE:
        raise GRPCError(
            Status.RESOURCE_EXHAUSTED,
            f"request message larger than max ({length} vs. {MAX_RECEIVE})",
        )
    body = await h2_stream.recv_data(length)
    if len(body) != length:
        raise GRPCError(Status.INVALID_ARGUMENT, "the request message was cut short")
    try:
        request: T = stream._codec.decode(body, stream._recv_type)
    except Exception as err:  # the codec's own error types vary
        raise GRPCError(Status.INVALID_ARGUMENT, "the request message does not decode") from err
    return request
