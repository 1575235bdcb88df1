"""Compile the share-limit library, the CDI hook, the CUDA smoke program (and, for tests, the
stand-in CUDA driver) with ``cc``.

``python -m kubeacc.native.build [--out DIR] [--stub]`` builds into ``DIR`` (default
``.cache/native`` of the current directory) and prints the paths. A build is cached: the output
is kept while the sources and flags it came from are the same (a stamp file beside it records
their hash), and each file is written under a temporary name and renamed, so concurrent builds
never see half a library.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent
LIBRARY = "libkubeacc-sharelimit.so"
STUB_CUDA = "libcuda.so.1"
STUB_NVML = "libnvidia-ml.so.1"
HOOK = "kubeacc-cdi-hook"
SMOKE = "kubeacc-cuda-smoke"
CFLAGS = (
    "-std=c11",
    "-O2",
    "-fPIC",
    "-shared",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fvisibility=hidden",
    # The library's and the stand-in driver's references to their own functions stay their
    # own: a preloaded definition of the same name must not replace them.
    "-Wl,-Bsymbolic",
)
#: The CDI hook: one static program, so that it runs on any host it is copied to.
PROGRAM_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-static")
#: The CUDA smoke program: linked against the C library of the container it runs in (it
#: dlopens the driver, which a static program cannot do reliably).
DYNAMIC_PROGRAM_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{SRC}")


class BuildError(RuntimeError):
    """The C compiler is missing or refused the sources (the message has its output)."""


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("no C compiler: install gcc (or set CC)")
    return cc


def _build(
    out: Path,
    name: str,
    source: str,
    extra: tuple[str, ...] = (),
    program: bool = False,
    dynamic: bool = False,
) -> Path:
    cc = compiler()
    if program:
        args = [*(DYNAMIC_PROGRAM_FLAGS if dynamic else PROGRAM_FLAGS)]
    else:
        args = [*CFLAGS, f"-Wl,-soname,{name}", *extra]
    digest = hashlib.sha256()
    for part in (cc, *args, (SRC / source).read_text(), (SRC / "cuda_api.h").read_text()):
        digest.update(part.encode() + b"\0")
    target, stamp = out / name, out / f".{name}.sha256"
    try:
        if target.is_file() and stamp.read_text() == digest.hexdigest():
            return target
    except OSError:
        pass
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=out)
    os.close(fd)
    cmd = [cc, *args, "-o", tmp, str(SRC / source), "-ldl", "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BuildError(f"{' '.join(cmd)}:\n{proc.stderr.strip()}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    stamp.write_text(digest.hexdigest())
    return target


def build_library(out: Path) -> Path:
    """The share-limit library, ``out/libkubeacc-sharelimit.so``."""
    return _build(out, LIBRARY, "sharelimit.c")


def build_stub(out: Path) -> tuple[Path, Path]:
    """The stand-in ``libcuda.so.1`` and ``libnvidia-ml.so.1`` (tests only)."""
    return (
        _build(out, STUB_CUDA, "stubcuda.c"),
        _build(out, STUB_NVML, "stubcuda.c", ("-DSTUB_NVML",)),
    )


def build_hook(out: Path) -> Path:
    """The CDI hook program, ``out/kubeacc-cdi-hook`` (kubeacc.node.userspace.hook)."""
    return _build(out, HOOK, "cdihook.c", program=True)


def build_smoke(out: Path) -> Path:
    """The conformance kit's CUDA smoke program, ``out/kubeacc-cuda-smoke`` (docs/selftest.md)."""
    return _build(out, SMOKE, "cudasmoke.c", program=True, dynamic=True)


def build_program(source: Path, out: Path, stub_dir: Path | None, *extra: str) -> Path:
    """A test program (``source``) linked against the stand-in driver in ``stub_dir`` (None:
    not linked against it, the program opens it itself); ``extra``: more linker arguments."""
    cc = compiler()
    cmd = [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{SRC}", "-o", str(out)]
    cmd += [str(source)]
    if stub_dir is not None:
        cmd += [f"-L{stub_dir}", f"-l:{STUB_CUDA}", f"-l:{STUB_NVML}"]
    cmd += ["-ldl", "-lpthread", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)}:\n{proc.stderr.strip()}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kubeacc.native.build", description=__doc__)
    ap.add_argument("--out", type=Path, default=Path(".cache/native"))
    ap.add_argument("--stub", action="store_true", help="also the stand-in CUDA driver and NVML")
    ns = ap.parse_args(argv)
    try:
        paths = [build_library(ns.out), build_hook(ns.out), build_smoke(ns.out)]
        if ns.stub:
            paths += build_stub(ns.out)
    except (BuildError, OSError) as exc:
        print(f"kubeacc.native.build: {exc}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
