"""SIGTERM and SIGINT for the long-running commands: stop cleanly, or exit anyway.

The first signal asks the command to stop (sets the returned event, calls ``on_stop``) and arms
a watchdog: a process still alive :data:`GRACE` seconds later, whatever it is stuck in (a host
read, a hung API server, a thread that does not join), leaves with ``os._exit``. Every state the
agent writes is already crash-safe (a SIGKILL at any moment loses nothing), so cutting the clean
stop short loses nothing either. A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Seconds between the first SIGTERM/SIGINT and the forced exit.
GRACE = 3.0


def stop_on_signals(
    on_stop: Callable[[], None] | None = None, grace: float = GRACE
) -> threading.Event:
    """Install the handlers (main thread only); the event is set by the first signal."""
    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        if stop.is_set():
            _exit(signum, "second signal")
        stop.set()
        watchdog = threading.Timer(grace, _exit, (signum, f"still running {grace:g} s after"))
        watchdog.daemon = True
        watchdog.name = "exit-watchdog"
        watchdog.start()
        if on_stop is not None:
            on_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)
    return stop


def _exit(signum: int, why: str) -> None:
    name = signal.Signals(signum).name
    # The message goes straight to stderr: logging may hold a lock the stuck thread owns.
    sys.stderr.write(f"kubeacc: {why} {name}; exiting now\n")
    sys.stderr.flush()
    os._exit(128 + signum)
