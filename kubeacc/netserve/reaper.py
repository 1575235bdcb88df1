"""Deadlines on connections: a socket past its deadline is shut down, whatever it waits for.

A socket timeout bounds one ``recv``; a client sending a byte every few seconds passes every
such timeout and still holds the connection for hours. The reaper bounds the whole phase: when
its deadline passes, the socket is shut down and the thread serving it sees end-of-file.
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
        self._due: dict[socket.socket, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reaped = 0

    def due_in(self, sock: socket.socket, seconds: float) -> None:
        with self._lock:
            self._due[sock] = time.monotonic() + seconds

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
            late = [s for s, due in self._due.items() if due <= now]
            for s in late:
                del self._due[s]
        for s in late:
            self.reaped += 1
            # socket.socket's own shutdown, also for an SSLSocket: it ends the TCP stream under
            # the TLS layer without touching the TLS object another thread is using.
            with contextlib.suppress(OSError):  # already closed
                socket.socket.shutdown(s, socket.SHUT_RDWR)
