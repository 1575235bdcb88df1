"""Semantic versions as Kubernetes CEL's ``semver`` library treats them.

``semver(s)`` accepts strict ``MAJOR.MINOR.PATCH[-pre][+build]``; with ``normalize=true`` a
leading ``v``, missing minor/patch and leading zeros are accepted. Ordering follows semver 2.0
precedence (build metadata ignored).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STRICT = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class SemverError(ValueError):
    pass


@dataclass(frozen=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return core + ("-" + ".".join(self.pre) if self.pre else "")

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release sorts after its pre-releases; numeric identifiers before alphanumeric.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def compare(self, other: Semver) -> int:
        a, b = self.key(), other.key()
        return (a > b) - (a < b)


def _normalize(text: str) -> str:
    s = text[1:] if text.startswith("v") else text
    rest = ""
    for sep in ("-", "+"):
        if sep in s:
            idx = s.index(sep)
            s, rest = s[:idx], s[idx:] + rest
            break
    parts = s.split(".")
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise SemverError(f"could not parse {text!r} as semver")
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + rest


def parse_semver(text: str, normalize: bool = False) -> Semver:
    s = _normalize(text) if normalize else text
    m = _STRICT.match(s)
    if not m:
        raise SemverError(f"could not parse {text!r} as semver")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre)


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize)
    except SemverError:
        return False
    return True
