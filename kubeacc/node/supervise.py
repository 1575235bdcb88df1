"""A loop that survives any exception: restarted after a pause, each restart counted.

The agent's loops catch the failures they expect (API server away, a failed discovery pass);
anything else (a bug, ``EMFILE`` where nobody expected a file) would end the thread and
leave the node's slices and labels unattended. :func:`supervised` runs the loop again after
a growing pause (1 s doubling to 30 s; reset after a minute without a crash).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

MAX_PAUSE = 30.0
#: A run this long without a crash resets the pause.
HEALTHY_RUN = 60.0


def supervised(
    name: str,
    loop: Callable[[], None],
    stop: threading.Event,
    on_restart: Callable[[BaseException], None] = lambda _exc: None,
) -> threading.Thread:
    """Start ``loop`` in a daemon thread ``name``; rerun it until ``stop`` is set."""

    def run() -> None:
        pause = 1.0
        while not stop.is_set():
            started = time.monotonic()
            try:
                loop()
                return  # the loop saw stop and ended
            except Exception as exc:
                if time.monotonic() - started > HEALTHY_RUN:
                    pause = 1.0
                log.exception(
                    "%s stopped on an unexpected error; restarting in %.0f s", name, pause
                )
                try:
                    on_restart(exc)
                except Exception:
                    log.exception("%s: restart hook failed", name)
                if stop.wait(pause):
                    return
                pause = min(pause * 2, MAX_PAUSE)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
