"""The self test's report: the node (host, kernel, driver) and one line per check.

A check passes, fails, or is skipped with the reason it did not run (not asked for, nothing on
the node to check). The text form is for a terminal and a bug report; ``-o json`` the same
facts for a tool.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from typing import Any

from kubeacc import __version__
from kubeacc.host import Host
from kubeacc.status.model import Result as Status


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAIL

    def line(self) -> str:
        """One terminal line; control characters escaped: a detail may quote what a container
        of the smoke image printed (an escape sequence, a newline and a forged ``PASS``)."""
        text = f"{self.status.upper()}  {self.name}" + (f": {self.detail}" if self.detail else "")
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def passed(name: str, detail: str = "") -> Check:
    return Check(name, Status.PASS, detail)


def failed(name: str, detail: str) -> Check:
    return Check(name, Status.FAIL, detail)


def skipped(name: str, reason: str) -> Check:
    return Check(name, Status.SKIP, reason)


def verdict(name: str, good: bool, detail: str) -> Check:
    return Check(name, Status.PASS if good else Status.FAIL, detail)


@dataclass
class Report:
    node: dict[str, str]
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def counts(self) -> dict[str, int]:
        return {s.value: sum(1 for c in self.checks if c.status is s) for s in Status}

    def text(self) -> str:
        lines = [f"{k}: {v}" for k, v in self.node.items()]
        lines += ["", *(c.line() for c in self.checks)]
        n = self.counts()
        lines.append(f"{n['pass']} passed, {n['fail']} failed, {n['skip']} skipped")
        return "\n".join(lines)

    def as_json(self) -> str:
        doc: dict[str, Any] = {
            "node": self.node,
            "checks": [
                {"name": c.name, "status": c.status.value, "detail": c.detail} for c in self.checks
            ],
            "summary": self.counts(),
        }
        return json.dumps(doc, indent=2)


def node_facts(host: Host, driver: str | None) -> dict[str, str]:
    """Host name, kernel, architecture and driver of the node, as its own files say."""
    files = host.files()

    def read(path: str) -> str:
        return (files.read_text(path, required=False) or "").strip() or "unknown"

    return {
        "host": read("/proc/sys/kernel/hostname"),
        "kernel": read("/proc/sys/kernel/osrelease"),
        "architecture": platform.machine(),
        "driver": driver or "none loaded",
        "kube-acc": __version__,
        "host root": str(host.root),
    }
