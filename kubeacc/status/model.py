"""One check's result: what was checked, where, whether it passed, and what to do if not."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Result(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    #: Not applicable here (e.g. no agent Pods to judge: agents run outside the chart).
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    name: str
    #: ``cluster`` or the node's name.
    scope: str
    result: Result
    detail: str
    #: What to do about a failure (empty for a pass or a skip).
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.result is Result.FAIL

    def to_dict(self) -> dict[str, Any]:
        out = {"check": self.name, "scope": self.scope, "result": self.result.value}
        out["detail"] = self.detail
        if self.fix:
            out["fix"] = self.fix
        return out


def passed(name: str, scope: str, detail: str) -> Check:
    return Check(name, scope, Result.PASS, detail)


def failed(name: str, scope: str, detail: str, fix: str) -> Check:
    return Check(name, scope, Result.FAIL, detail, fix)


def skipped(name: str, scope: str, detail: str) -> Check:
    return Check(name, scope, Result.SKIP, detail)
