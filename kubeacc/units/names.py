"""Model names as tokens, so that an admin's or a pod's spelling matches discovery's models.

``NVIDIA H100 80GB HBM3`` → ``("nvidia", "h100", "80gb", "hbm3")``. A name matches a model when
its tokens appear among the model's tokens in the same order (not necessarily next to each
other): ``H100`` matches ``h100-80gb-hbm3`` and ``H100 PCIe``; ``KunLun R200`` matches
``KUNLUN AI accelerator R200``; ``A10`` does not match ``A100-SXM4-40GB`` (tokens are compared
whole). Among several matching names the one with the most tokens is the most specific.
"""

from __future__ import annotations

import re

_SPLIT = re.compile(r"[^a-z0-9]+")


def tokens(name: str) -> tuple[str, ...]:
    return tuple(t for t in _SPLIT.split(name.lower()) if t)


def matches(pattern: tuple[str, ...], model: tuple[str, ...]) -> bool:
    """Whether every token of ``pattern`` occurs in ``model``, in order."""
    if not pattern:
        return False
    it = iter(model)
    return all(any(t == m for m in it) for t in pattern)
