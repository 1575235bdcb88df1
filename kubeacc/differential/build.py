"""Build (or reuse) the Go allocator harness from ``tools/allocator``.

The harness is built against one Kubernetes release's allocator: v1.37.2 (the main lane;
``go.mod``) or v1.36.3 (the compatibility lane; ``go-1.36.mod`` and the ``k8s136`` build tag,
which selects that release's feature set). ``KUBEACC_ALLOCATOR_VERSION`` (``1.37`` or ``1.36``)
picks one when the caller names none; the default is the main lane's, v1.37.2. The engine
follows the harness's release (:mod:`kubeacc.engine.release`) in the comparison.

A lane may also run the allocator with feature gates set on top of the release's
(``KUBEACC_ALLOCATOR_GATES=DRADeviceCompatibilityGroups=true``, kube-scheduler's syntax): the
same binary, started with ``-feature-gates``; the engine then follows those gates too.

The binary lands in ``$KUBEACC_CACHE/allocator-<release>-<hash>/allocator``; the hash covers the
harness's Go sources, module files and this file, so an unchanged harness is never rebuilt. The
Go environment and the lock are the testbed build's (same module cache, same go.sum policy).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from kubeacc.engine import celgo
from kubeacc.engine.release import ReleaseError, parse_gates, release, with_gates
from kubeacc.testbed.build import BuildError, cache_root, cached_go_build, source_key

BINARY = "allocator"
VERSION_ENV = "KUBEACC_ALLOCATOR_VERSION"
GATES_ENV = "KUBEACC_ALLOCATOR_GATES"


@dataclass(frozen=True)
class Harness:
    """One release's build of the harness: its module file and build tags."""

    release: str
    modfile: str
    tags: tuple[str, ...] = ()
    #: feature gates the allocator runs with on top of the release's defaults
    gates: tuple[tuple[str, bool], ...] = ()

    def run_args(self) -> list[str]:
        """Arguments of the built binary for this lane."""
        if not self.gates:
            return []
        return ["-feature-gates", ",".join(f"{n}={str(v).lower()}" for n, v in self.gates)]

    def build_args(self) -> list[str]:
        args = ["go", "build", "-modfile", self.modfile]
        if self.tags:
            args += ["-tags", ",".join(self.tags)]
        return args


HARNESSES: dict[str, Harness] = {
    "1.37": Harness(release="v1.37.2", modfile="go.mod"),
    "1.36": Harness(release="v1.36.3", modfile="go-1.36.mod", tags=("k8s136",)),
}
DEFAULT = "1.37"


def harness(name: str | None = None, gates: str | None = None) -> Harness:
    """The harness ``name`` (default: ``$KUBEACC_ALLOCATOR_VERSION``, else :data:`DEFAULT`)
    with ``gates`` (``Name=true,...``; default: ``$KUBEACC_ALLOCATOR_GATES``, else none)."""
    key = (name if name is not None else os.environ.get(VERSION_ENV) or DEFAULT).lstrip("v")
    found = HARNESSES.get(key)
    if found is None:
        raise BuildError(
            f"allocator harness {key!r} is unknown; choose one of {', '.join(sorted(HARNESSES))}"
        )
    text = gates if gates is not None else os.environ.get(GATES_ENV, "")
    if not text.strip():
        return found
    try:
        named = parse_gates(text)
        with_gates(release(found.release), named)  # one the engine follows, in this release
    except ReleaseError as e:
        raise BuildError(f"allocator harness gates: {e}") from None
    return replace(found, gates=tuple(sorted(named.items())))


def source_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "tools" / "allocator"


def _command(which: Harness, out: Path) -> list[str]:
    return [*which.build_args(), "-o", str(out / BINARY), "."]


def build_key(src: Path, which: Harness | None = None) -> str:
    which = which or harness()
    inputs = [p for p in src.rglob("*") if p.is_file() and p.suffix in {".go", ".mod", ".sum"}]
    return source_key(inputs, _command(which, Path("OUT")))


def binary_path(src: Path | None = None, which: Harness | None = None) -> Path:
    src = src or source_dir()
    which = which or harness()
    return cache_root() / f"allocator-{which.release}-{build_key(src, which)}" / BINARY


def ensure_built(which: Harness | None = None) -> Path:
    """The harness binary, built first if the sources changed (one builder at a time)."""
    which = which or harness()
    src = source_dir()
    if not (src / which.modfile).is_file():
        raise BuildError(f"allocator harness sources not found at {src / which.modfile}")
    target = binary_path(src, which)
    cached_go_build(
        target.parent,
        what="the allocator harness",
        cwd=src,
        command=lambda out: _command(which, out),
        outputs=[BINARY],
    )
    return target


#: kube-scheduler's selector CEL as a C shared library (tools/celgo; kubeacc.engine.celgo),
#: built against the main lane's modules; stripped (21 MB instead of 29 MB)
CELGO_RELEASE = HARNESSES[DEFAULT].release


def celgo_source_dir() -> Path:
    return source_dir().parent / "celgo"


def _celgo_command(out: Path) -> list[str]:
    return [
        "env",
        "CGO_ENABLED=1",
        "go",
        "build",
        "-buildmode=c-shared",
        "-trimpath",
        "-ldflags=-s -w",
        "-o",
        str(out / celgo.LIBRARY),
        ".",
    ]


def celgo_path(src: Path | None = None) -> Path:
    """The library's build for the current sources (``$KUBEACC_CACHE/celgo-<release>-<hash>``)."""
    src = src or celgo_source_dir()
    inputs = [p for p in src.iterdir() if p.is_file() and p.suffix in {".go", ".mod", ".sum"}]
    key = source_key(inputs, _celgo_command(Path("OUT")))
    return cache_root() / f"celgo-{CELGO_RELEASE}-{key}" / celgo.LIBRARY


def ensure_celgo() -> Path:
    """Build the library if its sources changed, and point the engine's default path
    (:func:`kubeacc.engine.celgo.library_path` without ``$KUBEACC_CELGO_LIBRARY``) at it."""
    src = celgo_source_dir()
    if not (src / "go.mod").is_file():
        raise BuildError(f"the CEL library's sources not found at {src / 'go.mod'}")
    target = celgo_path(src)
    cached_go_build(
        target.parent,
        what="kube-scheduler's CEL library",
        cwd=src,
        command=_celgo_command,
        outputs=[celgo.LIBRARY],
    )
    link = cache_root() / "celgo" / celgo.LIBRARY
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{celgo.LIBRARY}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)
    return target


def use_celgo() -> Path:
    """The library for the engine in a differential run: ``$KUBEACC_CELGO_LIBRARY`` when set,
    else this checkout's build (made if needed), which the engine is then pointed at."""
    named = os.environ.get(celgo.LIBRARY_ENV)
    if named:
        return Path(named)
    path = ensure_celgo()
    os.environ[celgo.LIBRARY_ENV] = str(path)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m kubeacc.differential.build [1.37|1.36|celgo]``: build, print the path."""
    args = sys.argv[1:] if argv is None else argv
    try:
        if args and args[0] == "celgo":
            print(ensure_celgo())
            return 0
        path = ensure_built(harness(args[0] if args else None))
    except BuildError as e:
        print(f"error: {e}")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
