"""How a synthetic host tree is told apart from a real host's root.

Its own module, so that the composition root (kubeacc/cli/hosts.py) can ask on a real node
without importing the synthetic host and its NVML stand-in.
"""

from __future__ import annotations

from pathlib import Path

#: Every synthetic host tree has this directory.
MARKER = ".synthetic"


def is_synthetic(root: Path) -> bool:
    """``root`` is a tree that :mod:`kubeacc.synthetic` built (for the composition root)."""
    return (root / MARKER).is_dir()
