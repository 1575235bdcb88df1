"""kubeacc.gcfreeze: start-up objects out of the collector's sight, garbage collected first.

Each check runs in its own interpreter: a freeze is process-wide and would keep the test
session's own objects from ever being collected.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_startup_state_is_frozen_and_garbage_is_collected_first() -> None:
    out = _run(
        """
        import gc, logging, weakref
        from kubeacc.gcfreeze import freeze_startup

        logging.basicConfig(level=logging.INFO)

        class Node:
            pass

        kept = [[i] for i in range(50_000)]  # lives on, like a daemon's modules and config
        cycle = Node()
        cycle.me = cycle  # garbage only the cyclic collector can free
        gone = weakref.ref(cycle)
        del cycle
        frozen = freeze_startup("test")
        assert gone() is None, "a cycle that was garbage before the freeze was frozen with it"
        assert frozen.objects >= 50_000, frozen
        assert frozen.full_after_ms < frozen.full_before_ms, frozen
        assert len(gc.get_objects()) < 50_000, "the collector still sees the start-up objects"
        later = Node()
        later.me = later
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None, "garbage made after the freeze must still be collected"
        print("ok", len(kept))
        """
    )
    assert out.startswith("ok 50000")


def test_freeze_startup_logs_what_it_did() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import logging; logging.basicConfig(level=logging.INFO);"
            "from kubeacc.gcfreeze import freeze_startup; freeze_startup('agent')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "agent: " in out.stderr and "start-up objects frozen" in out.stderr, out.stderr


def test_freeze_periodically_freezes_what_grew_and_stops() -> None:
    out = _run(
        """
        import gc, threading, time
        from kubeacc.gcfreeze import freeze_periodically

        stop = threading.Event()
        thread = freeze_periodically(stop, period=0.05, name="t-freeze")
        time.sleep(0.2)
        first = gc.get_freeze_count()
        grown = [[i] for i in range(20_000)]
        deadline = time.monotonic() + 10
        while gc.get_freeze_count() < first + 20_000:
            assert time.monotonic() < deadline, "what grew was not frozen"
            time.sleep(0.05)
        stop.set()
        thread.join(5)
        assert not thread.is_alive()
        print("ok", len(grown))
        """
    )
    assert out.startswith("ok 20000")
