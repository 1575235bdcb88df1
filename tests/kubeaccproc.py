"""A ``kubeacc`` command as a child process for the length of a ``with`` block."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from kubeacc.testbed.procs import terminate


@contextlib.contextmanager
def kubeacc_process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``kubeacc ARGS`` (output to ``log``); SIGTERM, then SIGKILL after 10 s, at the end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "kubeacc"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        terminate(proc, 10)
