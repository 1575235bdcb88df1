"""Build (or reuse) the testbed binaries from the pinned upstream Go modules.

The binaries land outside the repository, in
``$KUBEACC_CACHE/testbed/<k8s-version>-<hash>/bin`` (default cache ``~/.cache/kubeacc``), where the
hash covers every input of the build: go.mod/go.sum of both modules, the Go sources of the lane's
module directory (``testbed/`` for 1.37, ``testbed-1.36/`` for the compatibility lane, see
:mod:`kubeacc.testbed.versions`), etcd's module under ``testbed/etcd`` and this file. A complete
directory is reused as is; a build goes to a temporary directory and is renamed into place only
when every binary was produced.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from kubeacc.testbed.versions import ETCD_VERSION, KUBERNETES_VERSION, LANE

#: Every binary the testbed needs; the first group comes from testbed/, etcd from testbed/etcd.
K8S_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "fake-cri",
)
ETCD_BINARIES = ("etcd",)
ALL_BINARIES = K8S_BINARIES + ETCD_BINARIES


class BuildError(RuntimeError):
    """The Go build failed; the message carries the tail of the build log."""


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def source_dir() -> Path:
    """The lane's Go module (``testbed/`` or ``testbed-1.36/`` at the repository root, or
    ``$KUBEACC_TESTBED_SRC``)."""
    env = os.environ.get("KUBEACC_TESTBED_SRC")
    if env:
        return Path(env).resolve()
    return repo_root() / LANE.module_dir


def etcd_dir(src: Path) -> Path:
    """etcd's module: ``<src>/etcd`` where the sources carry one, else ``testbed/etcd`` (every
    lane runs the same etcd)."""
    own = src / "etcd"
    return own if (own / "go.mod").is_file() else repo_root() / "testbed" / "etcd"


def cache_root() -> Path:
    return Path(os.environ.get("KUBEACC_CACHE", str(Path.home() / ".cache" / "kubeacc")))


def build_inputs(src: Path) -> list[Path]:
    """Every file the build reads from the repository (symlinked sources by their content)."""
    dirs = [src, etcd_dir(src)]
    files = sorted(
        {
            p
            for d in dirs
            for p in d.rglob("*")
            if p.is_file() and p.suffix in {".go", ".mod", ".sum"}
        }
    )
    return [*files, Path(__file__).resolve()]


def build_key(src: Path | None = None) -> str:
    """``<k8s-version>-<hash of all build inputs>``."""
    src = src or source_dir()
    h = hashlib.sha256()
    for p in build_inputs(src):
        h.update(str(_label(p, src)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return f"{KUBERNETES_VERSION}-{h.hexdigest()[:16]}"


def _label(p: Path, src: Path) -> Path | str:
    if p.is_relative_to(src):
        return p.relative_to(src)
    if p.is_relative_to(repo_root()):
        return p.relative_to(repo_root())
    return p.name


def bin_dir(src: Path | None = None) -> Path:
    """Where the binaries for the current sources live (whether built yet or not)."""
    override = os.environ.get("KUBEACC_TESTBED_BIN")
    if override:
        return Path(override)
    return cache_root() / "testbed" / build_key(src) / "bin"


def is_complete(directory: Path) -> bool:
    return all(
        (directory / b).is_file() and os.access(directory / b, os.X_OK) for b in ALL_BINARIES
    )


def version_ldflags() -> str:
    """-ldflags stamping the real release into component-base and client-go."""
    v = KUBERNETES_VERSION
    major, minor = v.lstrip("v").split(".")[:2]
    parts = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        parts += [
            f"-X {pkg}.gitVersion={v}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(parts)


def go_env() -> dict[str, str]:
    """Environment for the go tool.

    sum.golang.org cannot be reached from the build machines, so the checksum database is off;
    integrity comes from the committed go.sum files (``-mod=readonly`` refuses any module whose
    hash is not already recorded there).
    """
    env = dict(os.environ)
    env.setdefault("GOPROXY", "https://proxy.golang.org,direct")
    env["GOSUMDB"] = "off"
    env["GOFLAGS"] = "-mod=readonly -buildvcs=false"
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = env.get("CGO_ENABLED", "0")
    return env


def _fmt(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


class _Progress:
    """Prints one progress line every few seconds while ``go build -v`` compiles packages."""

    def __init__(self, out: TextIO, label: str, total: int, start: float) -> None:
        self.out, self.label, self.total, self.start = out, label, total, start
        self.count = 0
        self.last = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def package(self, name: str) -> None:
        with self._lock:
            self.count += 1
            self.last = name
        if name.startswith("kubeacc.io/testbed"):
            self._print(f"building {name.rsplit('/', 1)[-1]}")

    def _print(self, what: str) -> None:
        with self._lock:
            n, last = self.count, self.last
        total = f"/{self.total}" if self.total else ""
        elapsed = _fmt(time.monotonic() - self.start)
        msg = f"[testbed build] {self.label}: {n}{total} packages, {elapsed}"
        self.out.write(f"{msg} - {what or last}\n")
        self.out.flush()

    def _tick(self) -> None:
        while not self._stop.wait(15):
            self._print("")


def _run_logged(
    cmd: list[str], cwd: Path, env: dict[str, str], log: TextIO, progress: _Progress | None
) -> int:
    log.write(f"$ (cd {cwd} && {' '.join(cmd)})\n")
    log.flush()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        stripped = line.strip()
        if progress is not None and stripped and " " not in stripped and "/" in stripped:
            progress.package(stripped)
    log.flush()
    return proc.wait()


def _count_packages(cwd: Path, env: dict[str, str], pattern: str, log: TextIO) -> int:
    out = subprocess.run(
        ["go", "list", "-deps", pattern],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        log.write(out.stderr)
        return 0
    # The standard library is normally already compiled in the go cache; count everything anyway.
    return len(out.stdout.split())


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no build log)"


def source_key(inputs: Iterable[Path], recipe: Sequence[str]) -> str:
    """A short hash of a Go tool's build: its input files (by name and content) and its recipe.

    The recipe is what else decides the output (the go command's arguments, the outputs'
    names), so a changed command line rebuilds while an edit to the Python around it does not.
    """
    h = hashlib.sha256()
    for p in sorted(inputs):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update("\0".join(recipe).encode())
    return h.hexdigest()[:16]


def cached_go_build(
    target: Path,
    *,
    what: str,
    cwd: Path,
    command: Callable[[Path], list[str]],
    outputs: Sequence[str],
) -> Path:
    """The directory ``target`` holding ``outputs``, built first if any is missing.

    ``command(tmp)`` is the go command line writing the outputs into ``tmp``, a scratch
    directory beside ``target`` that becomes ``target`` by one rename once every output is
    there: a build that fails or is killed leaves no ``target`` to be mistaken for a complete
    one. One builder at a time per target (a file lock beside it); its log is
    ``target/build.log`` and its duration ``target/build-seconds``.
    """

    def complete() -> bool:
        return all((target / name).is_file() for name in outputs)

    if complete():
        return target
    if shutil.which("go") is None:
        raise BuildError(f"the go tool is not on PATH; Go >= 1.26 builds {what}")
    with _lock(target.parent / f".{target.name}.lock"):
        if complete():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        start = time.monotonic()
        try:
            proc = subprocess.run(
                command(tmp), cwd=cwd, env=go_env(), capture_output=True, text=True, check=False
            )
            (tmp / "build.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
                raise BuildError(f"go build of {what} failed:\n{tail}")
            missing = [name for name in outputs if not (tmp / name).is_file()]
            if missing:
                raise BuildError(f"go build of {what} finished without {', '.join(missing)}")
            (tmp / "build-seconds").write_text(f"{time.monotonic() - start:.1f}\n")
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure_built(out: TextIO = sys.stderr, force: bool = False) -> Path:
    """Return the directory with all testbed binaries, building them first if needed."""
    override = os.environ.get("KUBEACC_TESTBED_BIN")
    if override:
        d = Path(override)
        if not is_complete(d):
            raise BuildError(f"KUBEACC_TESTBED_BIN={d} lacks some of {', '.join(ALL_BINARIES)}")
        return d
    src = source_dir()
    if not (src / "go.mod").is_file():
        raise BuildError(f"testbed Go sources not found at {src}")
    target = bin_dir(src)
    if is_complete(target) and not force:
        return target
    if shutil.which("go") is None:
        raise BuildError("the go tool is not on PATH; Go >= 1.26 is needed to build the testbed")
    key_dir = target.parent
    with _lock(key_dir.parent / f".{key_dir.name}.lock"):
        if is_complete(target) and not force:
            return target
        return _build(src, target, out)


def _build(src: Path, target: Path, out: TextIO) -> Path:
    key_dir = target.parent
    key_dir.mkdir(parents=True, exist_ok=True)
    log_path = key_dir / "build.log"
    env = go_env()
    start = time.monotonic()
    out.write(f"[testbed build] Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION}\n")
    out.write(f"[testbed build] output {target}, log {log_path}\n")
    out.flush()
    tmp = Path(tempfile.mkdtemp(prefix="bin.", dir=key_dir))
    try:
        with log_path.open("w") as log:
            steps: list[tuple[str, Path, list[str]]] = [
                ("kubernetes", src, ["./cmd/..."]),
                ("etcd", etcd_dir(src), ["./cmd/etcd"]),
            ]
            for label, cwd, pkgs in steps:
                elapsed = _fmt(time.monotonic() - start)
                out.write(f"[testbed build] {label}: downloading modules ({elapsed})\n")
                out.flush()
                rc = _run_logged(["go", "mod", "download", "-x"], cwd, env, log, None)
                if rc != 0:
                    raise BuildError(f"go mod download failed in {cwd}:\n{_tail(log_path)}")
                total = _count_packages(cwd, env, pkgs[0], log)
                cmd = ["go", "build", "-v", "-ldflags", version_ldflags(), "-o", f"{tmp}/", *pkgs]
                with _Progress(out, label, total, start) as progress:
                    rc = _run_logged(cmd, cwd, env, log, progress)
                if rc != 0:
                    raise BuildError(f"go build failed in {cwd} (exit {rc}):\n{_tail(log_path)}")
        missing = [b for b in ALL_BINARIES if not (tmp / b).is_file()]
        if missing:
            raise BuildError(f"build finished without {', '.join(missing)}; log {log_path}")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    out.write(f"[testbed build] done in {_fmt(time.monotonic() - start)}: {target}\n")
    out.flush()
    return target
