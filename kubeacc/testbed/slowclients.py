"""Slow clients for hostile-input tests and benches: connections held open on a local port.

Each connection sends ``opening`` once and ``drip`` every half second, and never finishes a
request; those the server closes are noticed and opened again, so ``count`` are held for as long
as the server lets them. Only for ports of this machine (127.0.0.1).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class SlowClients:
    """``with SlowClients(port, count, opening=b"GET / HTTP/1.1\\r\\nX: "):`` holds them."""

    def __init__(self, port: int, count: int, opening: bytes = b"", drip: bytes = b"") -> None:
        self.port = port
        self.count = count
        self.opening = opening
        self.drip = drip
        self.stop = threading.Event()
        #: How many connections were opened in all.
        self.opened = 0
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def __enter__(self) -> SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        held: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                held = [s for s in held if self._still_open(s)]
                while len(held) < self.count and not self.stop.is_set():
                    try:
                        s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                        s.sendall(self.opening)
                    except OSError:
                        break
                    held.append(s)
                    self.opened += 1
                self.stop.wait(0.5)
        finally:
            for s in held:
                with contextlib.suppress(OSError):
                    s.close()

    def _still_open(self, s: socket.socket) -> bool:
        """False (and closed) when the server closed it; else it gets its drip."""
        try:
            s.setblocking(False)
            if s.recv(1) == b"":
                s.close()
                return False
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return False
        if self.drip:
            try:
                s.send(self.drip)
            except OSError:
                s.close()
                return False
        return True
