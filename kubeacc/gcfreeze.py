"""Keep the cyclic garbage collector off what a daemon holds for its whole life.

A daemon's start leaves tens of thousands of objects that live until it exits: the modules,
classes and functions of everything it imported, its configuration, its servers. CPython's
collector walks all of them on every full collection, and a full collection comes whenever
enough new objects survived since the last one: ~30 ms in the node agent (~63,000 objects),
paid by whichever call allocated at that moment, so it lands in the p99 of a prepare or an
Allocate. :func:`gc.freeze` moves every object that exists now into a generation the collector
never walks; those objects are still freed by reference counting as before.

Only garbage that exists at the moment of a freeze is never collected (a cycle frozen stays),
so :func:`freeze_startup` collects first, and runs once, after the daemon's start-up; a state
that keeps growing (the extender's watch caches) is frozen again every so often by
:func:`freeze_periodically`, where the same holds for each pass.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

import msgspec

log = logging.getLogger(__name__)

#: Seconds between two freezes of :func:`freeze_periodically`.
FREEZE_SECONDS = 10.0


class Frozen(msgspec.Struct, frozen=True):
    """What one start-up freeze did."""

    #: Objects now out of the collector's sight.
    objects: int
    #: A full collection before the freeze and the first one after it, in milliseconds.
    full_before_ms: float
    full_after_ms: float


def freeze_startup(component: str) -> Frozen:
    """Collect the start-up's garbage, then freeze what is left; logs both collections' time.

    Call it once the daemon is serving (it costs one full collection, which the start-up
    should not wait for). The collector is on afterwards, also where the start ran with it off
    (``GC_OFF_UNTIL_FROZEN`` in :mod:`kubeacc.cli.entry`).
    """
    started = time.perf_counter()
    gc.collect()
    before = (time.perf_counter() - started) * 1000
    gc.freeze()
    started = time.perf_counter()
    gc.collect()
    after = (time.perf_counter() - started) * 1000
    gc.enable()
    frozen = Frozen(gc.get_freeze_count(), round(before, 2), round(after, 2))
    log.info(
        "%s: %d start-up objects frozen; a full garbage collection took %.1f ms before, "
        "%.2f ms after",
        component,
        frozen.objects,
        frozen.full_before_ms,
        frozen.full_after_ms,
    )
    return frozen


def freeze_periodically(
    stop: threading.Event, period: float = FREEZE_SECONDS, name: str = "gc-freeze"
) -> threading.Thread:
    """Freeze what exists every ``period`` s until ``stop`` is set (a thread, started)."""

    def run() -> None:
        while True:
            gc.freeze()
            if stop.wait(period):
                return

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
