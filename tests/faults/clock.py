"""Clock steps in the fault runner: kube-acc's processes under a wall clock the runner moves.

Every node's ``kubeacc agent`` and each of the two ``kubeacc controller`` replicas (as on two
nodes) run under Debian's libfaketime (``LD_PRELOAD``), each with a file of its own naming the
offset of its wall clock (``FAKETIME_TIMESTAMP_FILE``, re-read at every call:
``FAKETIME_NO_CACHE=1``). The monotonic clock is left alone (``FAKETIME_DONT_FAKE_MONOTONIC=1``),
as an NTP step leaves it. The file says ``+0`` until a ``clock-step`` fault writes one of
:data:`OFFSETS` (``+7200``: two hours ahead, ``-3600``: an hour behind), and ``+0`` again after
the seeded hold. The Go components (kubelets, API server) keep the true time: a node's or a
controller replica's clock off the API server's is the real case.

libfaketime 0.9.10 turns an absolute ``clock_nanosleep`` on ``CLOCK_MONOTONIC`` into a negative
one when the monotonic clock is not faked (Python 3.11's ``time.sleep`` then raises EINVAL), so
a small library of our own (``monosleep.c``), preloaded before it, hands every clock but
``CLOCK_REALTIME`` to the kernel untouched.
"""

from __future__ import annotations

import glob
import os
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kubeacc.native.build import compiler

SHIM_SOURCE = Path(__file__).resolve().with_name("monosleep.c")
LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
#: The steps a ``clock-step`` fault picks from (seconds): ahead two hours or ten minutes, behind
#: two minutes (within the five minutes certificates are backdated) or an hour (past it: the
#: API server's certificate is not valid yet for the stepped process, as on a real node).
OFFSETS = (7200, 600, -120, -3600)
#: Seconds the clock stays stepped (uniform): past a Lease's 15 s and a few telemetry passes.
HOLD = (20.0, 45.0)
#: Steps further back than this put the API server's certificate (backdated 5 minutes by the
#: testbed, as kubeadm does) in the stepped process's future: its TLS handshakes fail.
REACHABLE = -300


class ClockError(RuntimeError):
    """libfaketime is not installed, or the preloaded helper did not build."""


def libfaketime() -> Path:
    """Debian's ``libfaketime.so.1`` (package ``libfaketime``)."""
    found = sorted(glob.glob(LIBFAKETIME_GLOB))
    if not found:
        raise ClockError(
            f"no {LIBFAKETIME_GLOB}: install Debian's faketime and libfaketime "
            "(scripts/bootstrap.sh does)"
        )
    return Path(found[0])


def build_shim(out: Path) -> Path:
    """Compile ``monosleep.c`` into ``out`` (ClockError with the compiler's words)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "libkubeacc-monosleep.so"
    cmd = [compiler(), "-std=c11", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]
    cmd += ["-o", str(target), str(SHIM_SOURCE), "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ClockError(f"{' '.join(cmd)}:\n{proc.stderr.strip()}")
    return target


@dataclass(frozen=True)
class WallClock:
    """One process group's wall clock: the offset file its libfaketime reads."""

    path: Path
    shim: Path
    library: Path

    @classmethod
    def make(cls, path: Path, shim: Path) -> WallClock:
        clock = cls(path, shim, libfaketime())
        clock.step(0)
        return clock

    def step(self, seconds: int) -> None:
        """Set the offset from the true time (written whole: a reader never sees half)."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(f"{seconds:+d}\n")
        os.replace(tmp, self.path)

    def offset(self) -> int:
        return int(self.path.read_text())

    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": f"{self.shim} {self.library}",
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def wrapper(self) -> tuple[str, ...]:
        """A command prefix that runs its arguments under this clock."""
        return ("env", *(f"{k}={v}" for k, v in self.env().items()))


class Clocks:
    """The wall clocks of a run: one per node agent and one per controller replica."""

    def __init__(self, workdir: Path, names: list[str]) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        shim = build_shim(workdir)
        self.clocks = {name: WallClock.make(workdir / f"{name}.offset", shim) for name in names}

    def __getitem__(self, target: str) -> WallClock:
        return self.clocks[target]

    def targets(self) -> list[str]:
        return sorted(self.clocks)


@dataclass(frozen=True)
class Step:
    """A ``clock-step``: ``target``'s clock ``offset`` seconds off for ``hold`` seconds."""

    target: str
    offset: int
    hold: float


def plan(rng: random.Random, targets: list[str]) -> Step:
    """A seeded step: which clock, how far, how long."""
    return Step(rng.choice(targets), rng.choice(OFFSETS), round(rng.uniform(*HOLD), 1))
