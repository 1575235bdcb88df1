"""What one action on one device came to: the result a target reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Outcome:
    ok: bool
    reason: str
    message: str
    afu_id: str | None = None
    driver: str | None = None
