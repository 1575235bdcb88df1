"""Synthetic host trees for tests: each profile is built once per session and copied per test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from kubeacc.discovery import discover as discover_host
from kubeacc.host import Host
from kubeacc.model import Inventory
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost


class HostFactory:
    def __init__(self, cache: Path, scratch: Path):
        self._cache = cache
        self._scratch = scratch
        self._count = 0

    def pristine(self, profile: str) -> Path:
        """The shared, read-only build of a profile: don't modify it."""
        dest = self._cache / profile
        if not dest.exists():
            profiles.build(profile, dest)
        return dest

    def copy(self, profile: str) -> Path:
        """A private copy a test may damage."""
        self._count += 1
        dest = self._scratch / f"{profile}-{self._count}"
        shutil.copytree(self.pristine(profile), dest, symlinks=True)
        return dest


def discover(root: Path | str | Host, **kwargs: Any) -> Inventory:
    """Discovery of the synthetic host tree ``root`` (or of the Host given)."""
    host = SyntheticHost(root) if isinstance(root, (str, os.PathLike)) else root
    return discover_host(host, **kwargs)
