"""What of a device a selector reads, so verdicts are shared by devices that agree on it.

The engine caches a selector's verdict per device fingerprint (everything a selector could
see). Most selectors read two or three values (``device.attributes["d"].model``,
``device.capacity["d"].memory``), and devices that differ elsewhere (a PCIe root, an index)
get the same verdict: keyed by the values read, one evaluation serves them all. Every
occurrence of the word ``device`` in the expression must be one of ``device.driver``,
``device.allowMultipleAllocations`` or ``device.attributes|capacity[domain].name`` (or
``[domain][name]``) with literal keys, the name not called as a function; a ``has()`` test
counts (a missing value is part of the key). Anything else (a whole domain map, a computed key,
``cel.bind`` of a domain, optional selection, a variable named ``device``) makes no key, and
the fingerprint is used as before. The expression must compile (the checker has then accepted
it); the text is read rather than the checked tree, whose decoding costs more than the
evaluations it saves.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from functools import lru_cache
from typing import Any

from kubeacc.engine.celenv import CelError, compile_selector

Path = tuple[str, ...]

_MISSING = ("missing",)
_WORD = re.compile(r"\bdevice\b")
_KEY = r"""\s*\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\]"""
_READ = re.compile(
    r"(?<![.\w])device\s*\.\s*(?:"
    r"(driver|allowMultipleAllocations)\b(?!\s*\()"
    r"|(attributes|capacity)" + _KEY + r"\s*(?:\.\s*([A-Za-z_]\w*)\b(?!\s*\()|" + _KEY + r")"
    r")"
)


@lru_cache(maxsize=4096)
def selector_reads(expression: str) -> tuple[Path, ...] | None:
    """The device values an expression reads, or None when it uses ``device`` otherwise (or
    does not compile)."""
    try:
        compile_selector(expression)
    except CelError:
        return None
    found: set[Path] = set()
    for m in _READ.finditer(expression):
        scalar, kind, dq, sq, name, ndq, nsq = m.groups()
        if scalar:
            found.add((scalar,))
        else:
            found.add(
                (kind, dq if dq is not None else sq, name or (ndq if ndq is not None else nsq))
            )
    if len(_WORD.findall(expression)) != sum(1 for _ in _READ.finditer(expression)):
        return None
    return tuple(sorted(found))


def view(variable: dict[str, Any], paths: tuple[Path, ...]) -> Hashable | None:
    """The values at ``paths`` of a device's CEL variable (None when one cannot be a key)."""
    out: list[Hashable] = []
    for path in paths:
        value: Any = variable.get(path[0], _MISSING)
        for step in path[1:]:
            value = value.get(step, _MISSING) if isinstance(value, dict) else _MISSING
        key = _hashable(value)
        if key is None:
            return None
        out.append(key)
    return (paths, tuple(out))


def _hashable(value: Any) -> Hashable | None:
    if value is _MISSING:
        return value
    if isinstance(value, (str, bool, int, float)):
        return (type(value).__name__, value)
    if isinstance(value, list):
        items = [_hashable(v) for v in value]
        return None if any(i is None for i in items) else ("list", tuple(items))
    desc = getattr(value, "DESCRIPTOR", None)
    if desc is not None and hasattr(value, "value"):
        # a quantity's form too (kubeacc.engine.celquantity: isInteger() reads it)
        return (str(desc.name), str(value.value), str(getattr(value, "rep", "")))
    return None
