"""The kube-acc image for the real-runtime testbed, made from what this machine already has.

``scripts/build-image.sh`` builds the release image from the Debian archive (minutes, a mirror);
the testbed needs the same program in a container without either. This module copies into one
OCI layer:

* the Python interpreter that runs the tests (``sys._base_executable``), its standard library
  (without its tests, IDLE, tkinter, ensurepip and the base installation's own site-packages)
  and every shared library ``ldd`` names for the interpreter and for each extension module,
  all at their paths on this machine (so the interpreter finds its prefix as it does here);
* a virtual environment at ``/opt/kubeacc`` (as in the Containerfile): ``pyvenv.cfg`` naming the
  interpreter, the installed distributions kube-acc requires (its ``Requires-Dist``, followed
  transitively, extras left out) and the ``kubeacc`` package from this source tree, plus the
  ``kubeacc`` console script;
* ``/etc/passwd`` and ``/etc/group`` with root and user 65532 (the image's user, like the
  release image), an empty ``/tmp``.

The image is :data:`KUBEACC_IMAGE` (entrypoint ``kubeacc``, user 65532, ``PATH`` starting with
``/opt/kubeacc/bin``). It is cached in ``$KUBEACC_CACHE/kubeacc-image-<version>-<hash>/`` where
the hash covers the interpreter, the distributions' names and versions, every file of the
``kubeacc`` package and this module; a cache hit costs one pass over the package's files.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import TextIO

import kubeacc
from kubeacc.testbed.build import _fmt, _lock, cache_root
from kubeacc.testbed.images import Image, write_image

KUBEACC_IMAGE = f"kubeacc.local/kubeacc:{kubeacc.__version__}"
VENV = PurePosixPath("/opt/kubeacc")
#: Parts of the standard library a server never imports.
_STDLIB_SKIP = {
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "site-packages",
    "pydoc_data",
}
#: Extension modules of the standard library that pull in libraries a server never needs
#: (Tk/X11, curses, readline, dbm, sqlite, NIS); left out with their libraries.
_DYNLOAD_SKIP = ("_tkinter", "_curses", "readline", "_dbm", "_gdbm", "_sqlite3", "nis")
_PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "kubeacc:x:65532:65532:kube-acc:/nonexistent:/sbin/nologin\n"
)
_GROUP = "root:x:0:\nkubeacc:x:65532:\n"
#: ldd output: "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or "/lib64/ld-... (0x...)"
_LDD_PATH = re.compile(r"(?:=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)")


class KubeaccImageError(RuntimeError):
    """The image cannot be made (a missing distribution, no ldd)."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(root: str = "kubeacc") -> list[metadata.Distribution]:
    """The installed distributions ``root`` needs at run time (not ``root`` itself)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = _norm(name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name == root:
                raise KubeaccImageError(f"{root} is not installed in {sys.prefix}") from None
            continue  # only wanted on another platform or Python (its marker says so)
        seen[key] = dist
        for req in dist.requires or []:
            requirement, _, marker = req.partition(";")
            if "extra" in marker:
                continue
            match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
            if match:
                todo.append(match.group(0))
    seen.pop(_norm(root))
    return sorted(seen.values(), key=lambda d: _norm(d.metadata["Name"]))


#: The test kit's packages: they run from the source tree and are neither in the wheel
#: (pyproject.toml's ``exclude``) nor in this image, so the testbed runs what a cluster runs.
TEST_KIT = ("testbed", "differential")


def _package_files(package_dir: Path) -> list[Path]:
    wanted = {".py", ".yaml", ".json", ".typed"}
    return sorted(
        p
        for p in package_dir.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and p.suffix in wanted
        and p.relative_to(package_dir).parts[0] not in TEST_KIT
    )


def cache_key(dists: list[metadata.Distribution], package_dir: Path) -> str:
    h = hashlib.sha256()
    parts = [os.path.realpath(sys._base_executable), sys.version]  # type: ignore[attr-defined]
    parts += [f"{d.metadata['Name']}=={d.version}" for d in dists]
    for part in parts:
        h.update(part.encode() + b"\0")
    for path in _package_files(package_dir):
        h.update(path.relative_to(package_dir).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def image_path(directory: Path | None = None) -> Path:
    """Where the image tarball for this interpreter and these sources is (built or not)."""
    package_dir = Path(kubeacc.__file__).resolve().parent
    key = cache_key(distributions(), package_dir)
    base = directory or cache_root()
    return base / f"kubeacc-image-{kubeacc.__version__}-{key}" / "kubeacc.tar"


def ensure_image(out: TextIO = sys.stderr) -> Image:
    """The kube-acc image tarball, built if this machine has no current one."""
    target = image_path()
    with _lock(target.parent.parent / f".{target.parent.name}.lock"):
        if not target.is_file():
            start = time.monotonic()
            out.write(f"[kubeacc image] building {KUBEACC_IMAGE} -> {target}\n")
            out.flush()
            build_image(target)
            _prune(target.parent)
            size = target.stat().st_size >> 20
            out.write(f"[kubeacc image] done in {_fmt(time.monotonic() - start)} ({size} MiB)\n")
            out.flush()
        else:
            os.utime(target)  # in use: not pruned by other source trees' builds
    return Image(KUBEACC_IMAGE, target, _manifest_digest(target))


def _prune(keep: Path, older_than_s: float = 86400) -> None:
    """Remove other kube-acc images of this cache (other sources) not used for a day."""
    for other in keep.parent.glob("kubeacc-image-*"):
        tarball = other / "kubeacc.tar"
        if other == keep or not tarball.is_file():
            continue
        if time.time() - tarball.stat().st_mtime > older_than_s:
            shutil.rmtree(other, ignore_errors=True)


def _manifest_digest(tarball: Path) -> str:
    import json

    with tarfile.open(tarball) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        return str(json.load(member)["manifests"][0]["digest"])


class _Layer:
    """The layer tar being written: every parent directory once, files at their paths."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.names: set[str] = set()

    def _dirs(self, path: PurePosixPath) -> None:
        for parent in reversed(path.parents[:-1]):
            name = str(parent).lstrip("/")
            if name not in self.names:
                self.names.add(name)
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                self.tar.addfile(info)

    def directory(self, path: str, mode: int = 0o755) -> None:
        p = PurePosixPath(path)
        self._dirs(p)
        name = str(p).lstrip("/")
        if name not in self.names:
            self.names.add(name)
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            self.tar.addfile(info)

    def data(self, path: str, data: bytes, mode: int = 0o644) -> None:
        import io

        p = PurePosixPath(path)
        self._dirs(p)
        info = tarfile.TarInfo(str(p).lstrip("/"))
        info.size, info.mode = len(data), mode
        self.names.add(info.name)
        self.tar.addfile(info, io.BytesIO(data))

    def symlink(self, path: str, target: str) -> None:
        p = PurePosixPath(path)
        self._dirs(p)
        info = tarfile.TarInfo(str(p).lstrip("/"))
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        self.names.add(info.name)
        self.tar.addfile(info)

    def file(self, source: Path, path: str | None = None) -> None:
        """``source`` (symlinks followed) at ``path`` (default: the same path), its mode and
        mtime kept (so the interpreter's cached bytecode stays valid)."""
        p = PurePosixPath(path or str(source))
        name = str(p).lstrip("/")
        if name in self.names:
            return
        self._dirs(p)
        st = source.stat()
        info = tarfile.TarInfo(name)
        info.size, info.mtime = st.st_size, int(st.st_mtime)
        info.mode = (st.st_mode & 0o7777) | 0o444
        self.names.add(name)
        with source.open("rb") as fh:
            self.tar.addfile(info, fh)


def _tree(root: Path, skip_top: set[str]) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if d not in skip_top and not d.startswith("config-")]
        dirnames.sort()
        for f in sorted(filenames):
            if (f.endswith(".pyc") and ".opt-" in f) or (
                f.endswith(".so") and f.startswith(_DYNLOAD_SKIP)
            ):
                continue
            yield here / f


def shared_libraries(binaries: Iterable[Path]) -> set[Path]:
    """Every library (and the dynamic loader) ``ldd`` resolves for these ELF files."""
    found: set[Path] = set()
    for binary in binaries:
        done = subprocess.run(
            ["ldd", str(binary)], capture_output=True, text=True, check=False, timeout=30
        )
        for line in done.stdout.splitlines():
            match = _LDD_PATH.search(line)
            if match:
                found.add(Path(match.group(1)))
    return found


def build_image(target: Path) -> Image:
    """Write the image tarball to ``target`` (see the module doc)."""
    package_dir = Path(kubeacc.__file__).resolve().parent
    dists = distributions()
    interpreter = Path(os.path.realpath(sys._base_executable))  # type: ignore[attr-defined]
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["stdlib"])
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = VENV / "lib" / py / "site-packages"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        layer_path = Path(tmp) / "layer.tar"
        elves: list[Path] = [interpreter]
        with tarfile.open(layer_path, "w", format=tarfile.PAX_FORMAT) as tar:
            layer = _Layer(tar)
            for d in ("dev", "proc", "sys", "etc", "run", "var"):
                layer.directory(f"/{d}")
            layer.directory("/tmp", 0o1777)
            layer.data("/etc/passwd", _PASSWD.encode())
            layer.data("/etc/group", _GROUP.encode())
            layer.file(interpreter)
            for f in _tree(stdlib, _STDLIB_SKIP):
                layer.file(f)
                if f.suffix == ".so":
                    elves.append(f)
            for dist in dists:
                for rel in dist.files or []:
                    src = Path(str(dist.locate_file(rel))).resolve()
                    if not src.is_file() or ".opt-" in src.name:
                        continue
                    if rel.parts[0] == ".." or (src.suffix == ".pth" and "kubeacc" in src.name):
                        continue  # console scripts of the dependency, editable hooks
                    layer.file(src, str(site / PurePosixPath(*rel.parts)))
                    if src.suffix == ".so" or ".so." in src.name:
                        elves.append(src)
            for f in _package_files(package_dir):
                layer.file(f, str(site / "kubeacc" / f.relative_to(package_dir).as_posix()))
            layer.data(
                str(site / f"kubeacc-{kubeacc.__version__}.dist-info" / "METADATA"),
                f"Metadata-Version: 2.1\nName: kubeacc\nVersion: {kubeacc.__version__}\n".encode(),
            )
            for lib in sorted(shared_libraries(elves)):
                layer.file(lib)
            version = ".".join(map(str, sys.version_info[:3]))
            layer.data(
                str(VENV / "pyvenv.cfg"),
                f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
                f"version = {version}\n".encode(),
            )
            layer.symlink(str(VENV / "bin" / "python3"), str(interpreter))
            layer.symlink(str(VENV / "bin" / "python"), "python3")
            layer.data(
                str(VENV / "bin" / "kubeacc"),
                f"#!{VENV}/bin/python3\nimport sys\n\nfrom kubeacc.cli.entry import main\n\n"
                "sys.exit(main())\n".encode(),
                mode=0o755,
            )
        return write_image(
            KUBEACC_IMAGE,
            ["--help"],
            layer_path,
            target,
            config={
                "Entrypoint": ["kubeacc"],
                "User": "65532:65532",
                "Env": [
                    f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "PYTHONDONTWRITEBYTECODE=1",
                ],
            },
        )
