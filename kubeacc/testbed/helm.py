"""Build (or reuse) helm from its Go module, for the chart tests.

``tools/helm/go.mod`` pins ``helm.sh/helm/v3`` as a Go tool (``tool helm.sh/helm/v3/cmd/helm``)
with every dependency's hash in ``go.sum``; the build goes through the module proxy like the
testbed's (same environment: no checksum database, ``-mod=readonly``, static binary). The binary
lands in ``$KUBEACC_CACHE/helm-<version>-<hash>/helm``, the hash covering go.mod, go.sum and the
build flags, and is reused while they are unchanged. ``KUBEACC_HELM_BIN=/path/to/helm`` uses a
prebuilt one instead.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from kubeacc.testbed.build import BuildError, _lock, _run_logged, _tail, cache_root, go_env

PACKAGE = "helm.sh/helm/v3/cmd/helm"
#: ``{version}`` is the pinned release; it is what ``helm version`` prints.
LDFLAGS = "-s -w -X helm.sh/helm/v3/internal/version.version={version}"


def module_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "tools" / "helm"


def helm_version(src: Path | None = None) -> str:
    """The helm release pinned in tools/helm/go.mod."""
    text = ((src or module_dir()) / "go.mod").read_text()
    found = re.search(r"^\s*helm\.sh/helm/v3 (v\S+)", text, re.MULTILINE)
    if found is None:
        raise BuildError("tools/helm/go.mod does not require helm.sh/helm/v3")
    return found.group(1)


def helm_path(src: Path | None = None) -> Path:
    """Where the helm binary for these sources is (built or not)."""
    override = os.environ.get("KUBEACC_HELM_BIN")
    if override:
        return Path(override)
    src = src or module_dir()
    h = hashlib.sha256()
    for part in ((src / "go.mod").read_bytes(), (src / "go.sum").read_bytes(), LDFLAGS.encode()):
        h.update(part)
        h.update(b"\0")
    return cache_root() / f"helm-{helm_version(src)}-{h.hexdigest()[:16]}" / "helm"


def ensure_helm(out: TextIO = sys.stderr) -> Path:
    """The helm binary, built first if it is not cached yet."""
    target = helm_path()
    if os.environ.get("KUBEACC_HELM_BIN"):
        if not os.access(target, os.X_OK):
            raise BuildError(f"KUBEACC_HELM_BIN={target} is not an executable")
        return target
    if os.access(target, os.X_OK):
        return target
    if shutil.which("go") is None:
        raise BuildError("the go tool is not on PATH; Go >= 1.26 is needed to build helm")
    with _lock(target.parent.parent / f".{target.parent.name}.lock"):
        if os.access(target, os.X_OK):
            return target
        return _build(module_dir(), target, out)


def _build(src: Path, target: Path, out: TextIO) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    log_path = target.parent / "build.log"
    version = helm_version(src)
    start = time.monotonic()
    out.write(f"[helm build] helm {version} -> {target} (log {log_path})\n")
    out.flush()
    tmp = Path(tempfile.mkdtemp(prefix="helm.", dir=target.parent))
    flags = LDFLAGS.format(version=version)
    try:
        with log_path.open("w") as log:
            env = go_env()
            rc = _run_logged(["go", "mod", "download"], src, env, log, None)
            if rc == 0:
                cmd = ["go", "build", "-ldflags", flags, "-o", str(tmp / "helm"), PACKAGE]
                rc = _run_logged(cmd, src, env, log, None)
        if rc != 0 or not (tmp / "helm").is_file():
            raise BuildError(f"helm build failed (exit {rc}):\n{_tail(log_path)}")
        (tmp / "helm").rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out.write(f"[helm build] done in {time.monotonic() - start:.0f} s\n")
    out.flush()
    return target
