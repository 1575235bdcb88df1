"""SIGTERM and SIGINT for the long-running commands: stop cleanly, or exit anyway.

The first signal asks the command to stop (sets the returned event, calls ``on_stop``) and arms
a watchdog: a process still alive :data:`GRACE` seconds later, whatever it is stuck in (a host
read, a hung API server, a thread that does not join), leaves with ``os._exit``. Every state the
agent writes is already crash-safe (a SIGKILL at any moment loses nothing), so cutting the clean
stop short loses nothing either. A second signal exits at once.

None of that runs in a Python signal handler. CPython runs handlers in the main thread, between
two bytecodes of whatever it was doing: holding the lock of the very event the handler would set
(``Event.wait`` between taking its condition and waiting on it), or the lock of the stderr buffer
it would write to. A handler that takes a lock there deadlocks the main thread, and with it the
forced exit. And a signal the kernel hands to another thread only flags the main thread, which
may be asleep in a wait for an hour. So the handlers do nothing; the interpreter's C-level
handler writes the signal's number to a pipe (:func:`signal.set_wakeup_fd`), whichever thread it
lands on, and a thread of its own reads the pipe and does the rest.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable

#: Seconds between the first SIGTERM/SIGINT and the forced exit.
GRACE = 3.0
#: The signals that stop a command.
STOPPING = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(
    on_stop: Callable[[], None] | None = None, grace: float = GRACE
) -> threading.Event:
    """Route SIGTERM/SIGINT to a stop (main thread only); the event is set by the first one.

    ``on_stop`` runs on a thread of its own once the event is set, the watchdog armed.
    """
    stop = threading.Event()
    read_end, write_end = os.pipe()  # both close on exec: children do not inherit them
    os.set_blocking(write_end, False)  # the C handler must never block (set_wakeup_fd)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for sig in STOPPING:
        signal.signal(sig, _ignore_here)
    thread = threading.Thread(
        target=_serve, args=(read_end, stop, on_stop, grace), name="signals", daemon=True
    )
    thread.start()
    return stop


def _ignore_here(signum: int, frame: object) -> None:
    """The Python-level handler: nothing, the signal thread acts on the wakeup byte."""


def _serve(
    read_end: int, stop: threading.Event, on_stop: Callable[[], None] | None, grace: float
) -> None:
    """The signal thread: stop on the first signal, ``os._exit`` on a second one or when the
    stop takes longer than ``grace`` seconds (``on_stop`` runs on a thread of its own, so a
    stop that hangs cannot keep this one from the deadline)."""
    signals = _Signals(read_end)
    first = signals.next(None)
    assert first is not None  # without a deadline it returns only with a signal
    stop.set()
    if on_stop is not None:
        threading.Thread(target=on_stop, name="stopping", daemon=True).start()
    second = signals.next(time.monotonic() + grace)
    if second is not None:
        _exit(second, "second signal")
    _exit(first, f"still running {grace:g} s after")


class _Signals:
    """The SIGTERM/SIGINT numbers written to the wakeup pipe, in order, none dropped."""

    def __init__(self, read_end: int) -> None:
        self._fd = read_end
        self._read: list[int] = []

    def next(self, deadline: float | None) -> int | None:
        """The next one; None once ``deadline`` (a monotonic time) has passed."""
        while not self._read:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._fd], [], [], timeout)
            if not readable:
                return None
            self._read += [n for n in os.read(self._fd, 64) if n in STOPPING]
        return self._read.pop(0)


def _exit(signum: int, why: str) -> None:
    name = signal.Signals(signum).name
    # Straight to the file descriptor: sys.stderr's buffer has a lock a stuck thread may hold.
    os.write(2, f"kubeacc: {why} {name}; exiting now\n".encode())
    os._exit(128 + signum)
