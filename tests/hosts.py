"""Synthetic host trees for tests: each profile is built once per session and copied per test."""

from __future__ import annotations

import shutil
from pathlib import Path

from kubeacc.synthetic import profiles


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
