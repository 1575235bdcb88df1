"""A running Go allocator harness: one scenario (JSON line) in, one result line out."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubeacc.differential.build import Harness, ensure_built, harness


class HarnessError(RuntimeError):
    """The harness died or answered with an error."""


class GoAllocator:
    """The scheduler's allocator (k8s.io/dynamic-resource-allocation/structured) as a process."""

    def __init__(self, binary: Path | None = None, which: Harness | None = None) -> None:
        which = which or harness()
        #: the Kubernetes release of the allocator (``v1.37.2``); a ``binary`` given must be it
        self.release = which.release
        #: the feature gates it runs with on top of the release's (the engine follows them)
        self.gates = dict(which.gates)
        self.proc = subprocess.Popen(
            [str(binary or ensure_built(which)), *which.run_args()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1 << 20,
        )

    def run(self, scenario: Mapping[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(scenario, separators=(",", ":")) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise HarnessError(f"allocator harness exited ({self.proc.poll()})")
        out: dict[str, Any] = json.loads(line)
        if out.get("error"):
            raise HarnessError(str(out["error"]))
        return out

    def pairs(self, scenario: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
        """For every claim and node: ``{"ok", "error", "allocation"}`` on the base state."""
        rows: list[list[dict[str, Any]]] = self.run({**scenario, "mode": "pairs"})["pairs"] or []
        return rows

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> GoAllocator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
