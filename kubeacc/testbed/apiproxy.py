"""The ``kubernetes`` Service inside a real-runtime node: a TCP proxy from its ClusterIP to the
API server.

Pods reach the API server the way in-cluster clients do everywhere: through the ``kubernetes``
Service in ``default`` (``KUBERNETES_SERVICE_HOST``/``_PORT``, which the kubelet puts in every
container's environment: ``10.0.0.1:443``). On a real node kube-proxy makes that ClusterIP
lead to the API server. The testbed has no kube-proxy, its API server listens only on the
machine's 127.0.0.1, and the node's pods live in the node's network namespace (hostNetwork pods)
or behind its CNI bridge (the others). This process stands in for kube-proxy for that one
Service, as kube-proxy's old userspace mode did:

* the testbed puts the ClusterIP on the node namespace's loopback device (``ip addr add
  10.0.0.1/32 dev lo``), so a hostNetwork pod reaches it directly and a bridged pod through its
  default route (the bridge, whose gateway address is in the node namespace);
* this process opens its listening socket *inside* the node's network namespace (``setns`` on
  the one thread that exists at start, then back), and dials the API server from the machine's
  namespace for every connection it accepts; bytes are copied both ways unchanged (TLS ends at
  the API server, whose certificate names the ClusterIP).

Nothing listens on the machine's interfaces and no traffic leaves the machine.

    python -m kubeacc.testbed.apiproxy --netns /run/netns/N --listen 10.0.0.1:443 \\
        --upstream 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import socket
import sys

#: ``CLONE_NEWNET`` from <sched.h>.
_CLONE_NEWNET = 0x40000000
READY = "apiproxy: listening"


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def listen_in(netns: str, host: str, port: int) -> socket.socket:
    """A listening TCP socket in the network namespace ``netns`` (a path such as
    ``/run/netns/N``); the calling thread is back in its own namespace afterwards."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.create_server((host, port), backlog=256)
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _serve(listener: socket.socket, upstream: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*upstream)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(ConnectionError, OSError):
                    await w.wait_closed()

    server = await asyncio.start_server(handle, sock=listener)
    print(f"{READY} on {listener.getsockname()} -> {upstream[0]}:{upstream[1]}", flush=True)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubeacc.testbed.apiproxy")
    parser.add_argument("--netns", required=True, help="network namespace file to listen in")
    parser.add_argument("--listen", required=True, help="HOST:PORT inside that namespace")
    parser.add_argument("--upstream", required=True, help="HOST:PORT in this namespace")
    args = parser.parse_args(argv)
    try:
        listener = listen_in(args.netns, *_address(args.listen))
    except (OSError, ValueError) as exc:
        print(f"apiproxy: cannot listen on {args.listen} in {args.netns}: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(listener, _address(args.upstream)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
