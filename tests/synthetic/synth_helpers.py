"""Plain os/pathlib readers for the layout tests (independent of the generator's code)."""

from __future__ import annotations

import os
from pathlib import Path


def read(path: Path) -> str:
    return path.read_text().strip()


def pci_devices(root: Path) -> dict[str, Path]:
    """BDF -> resolved real device dir, from ``/sys/bus/pci/devices``."""
    d = root / "sys/bus/pci/devices"
    return {p.name: p.resolve() for p in sorted(d.iterdir())}


def by_id(root: Path, vendor: int, device: int) -> list[Path]:
    return [
        p
        for p in pci_devices(root).values()
        if read(p / "vendor") == f"0x{vendor:04x}" and read(p / "device") == f"0x{device:04x}"
    ]


def all_symlinks(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out.append(p)
    return out


def snapshot(root: Path) -> dict[str, str | bytes]:
    """Relative path -> file bytes, ``->target`` for links, ``<dir>`` for directories."""
    out: dict[str, str | bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "->" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "<dir>"
            else:
                out[rel] = p.read_bytes()
    return out
