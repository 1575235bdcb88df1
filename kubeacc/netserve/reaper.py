"""Deadlines on connections: a socket past its deadline is shut down, whatever it waits for.

A socket timeout bounds one ``recv``; a client sending a byte every few seconds passes every
such timeout and still holds the connection for hours. The reaper bounds the whole phase: when
its deadline passes, the socket is shut down and the thread serving it sees end-of-file.

It also knows which connections are only waiting (handshake, keep-alive, request head): when
the port is full, the server evicts the one that has waited longest for the newcomer, so
clients holding idle connections cannot lock out one that asks something (a probe).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

#: How often the reaper looks (seconds): deadlines are met to within this.
TICK = 0.25


class Reaper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: socket -> (deadline, evictable since or None when at work)
        self._due: dict[socket.socket, tuple[float, float | None]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reaped = 0
        self.evicted = 0

    def due_in(self, sock: socket.socket, seconds: float, *, waiting: bool = False) -> None:
        """``sock``'s phase ends in ``seconds``; ``waiting``: it only waits for its client."""
        now = time.monotonic()
        with self._lock:
            since = None
            if waiting:
                old = self._due.get(sock)
                since = old[1] if old is not None and old[1] is not None else now
            self._due[sock] = (now + seconds, since)

    def evict_oldest_waiting(self) -> bool:
        """Shut down the connection that has waited longest; False if none is waiting."""
        with self._lock:
            waiting = [(since, s) for s, (_, since) in self._due.items() if since is not None]
            if not waiting:
                return False
            _, victim = min(waiting, key=lambda w: w[0])
            del self._due[victim]
        self.evicted += 1
        _shutdown(victim)
        return True

    def forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._due.pop(sock, None)

    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{name}-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(TICK):
            self.reap()

    def reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [s for s, (due, _) in self._due.items() if due <= now]
            for s in late:
                del self._due[s]
        for s in late:
            self.reaped += 1
            _shutdown(s)


def _shutdown(s: socket.socket) -> None:
    # socket.socket's own shutdown, also for an SSLSocket: it ends the TCP stream under the
    # TLS layer without touching the TLS object another thread is using.
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(s, socket.SHUT_RDWR)
