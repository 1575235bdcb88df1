"""Build (or reuse) the Go allocator harness from ``tools/allocator``.

The binary lands in ``$KUBEACC_CACHE/allocator-<hash>/allocator``; the hash covers the harness's
Go sources, go.mod and go.sum and this file, so an unchanged harness is never rebuilt. The Go
environment and the lock are the testbed build's (same module cache, same go.sum policy).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kubeacc.testbed.build import BuildError, _lock, cache_root, go_env

BINARY = "allocator"


def source_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "tools" / "allocator"


def build_key(src: Path) -> str:
    h = hashlib.sha256()
    inputs = sorted(
        p for p in src.rglob("*") if p.is_file() and p.suffix in {".go", ".mod", ".sum"}
    )
    for p in [*inputs, Path(__file__).resolve()]:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def binary_path(src: Path | None = None) -> Path:
    src = src or source_dir()
    return cache_root() / f"allocator-{build_key(src)}" / BINARY


def ensure_built() -> Path:
    """The harness binary, built first if the sources changed (one builder at a time)."""
    src = source_dir()
    if not (src / "go.mod").is_file():
        raise BuildError(f"allocator harness sources not found at {src}")
    target = binary_path(src)
    if target.is_file():
        return target
    if shutil.which("go") is None:
        raise BuildError("the go tool is not on PATH; Go >= 1.26 builds the allocator harness")
    with _lock(target.parent.parent / f".{target.parent.name}.lock"):
        if target.is_file():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="build.", dir=target.parent))
        start = time.monotonic()
        try:
            proc = subprocess.run(
                ["go", "build", "-o", str(tmp / BINARY), "."],
                cwd=src,
                env=go_env(),
                capture_output=True,
                text=True,
                check=False,
            )
            (target.parent / "build.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
                raise BuildError(f"go build of the allocator harness failed:\n{tail}")
            (tmp / BINARY).rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        (target.parent / "build-seconds").write_text(f"{time.monotonic() - start:.1f}\n")
        return target


def main() -> int:
    try:
        path = ensure_built()
    except BuildError as e:
        print(f"error: {e}")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
