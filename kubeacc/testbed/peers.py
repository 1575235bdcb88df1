"""Build (or reuse) the Go peers the node daemons are benchmarked beside.

Two programs of the pinned upstream module ``k8s.io/kubernetes`` (v1.37.2), unchanged:

- ``sample-device-plugin`` (``test/images/sample-device-plugin``): a kubelet device plugin with
  two devices ``Dev-1`` and ``Dev-2`` of ``example.com/resource``; it registers at the kubelet's
  fixed ``/var/lib/kubelet/device-plugins/kubelet.sock`` (``PLUGIN_SOCK_DIR`` only moves its
  own socket), so a benchmark runs it in a mount namespace of its own;
- ``test-driver`` (``test/e2e/dra/test-driver``): the DRA driver kube-scheduler's end-to-end
  tests run, as ``test-driver --kubeconfig K kubelet-plugin --node-name N
  --plugin-registration-path DIR --datadir DIR --cdi-dir DIR``. Its NodePrepareResources reads
  the claim from the API server (the kubelet plugin helper of
  ``k8s.io/dynamic-resource-allocation``), writes one CDI spec per request (no fsync) and keeps
  what it prepared in memory only (no checkpoint); NodeUnprepareResources removes the spec.

The module ``tools/peers`` names both as ``tool`` lines (its ``go.sum`` pins every module, as
the testbed's does). The binaries land in ``$KUBEACC_CACHE/peers-<release>-<hash>/``; the hash
covers the module files and this file, so unchanged sources are never rebuilt.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from kubeacc.testbed.build import BuildError, _lock, cache_root, go_env, repo_root

#: The release the peers come from (``tools/peers/go.mod`` requires it).
RELEASE = "v1.37.2"
#: Binary name -> its package in ``k8s.io/kubernetes``.
PEERS = {
    "sample-device-plugin": "k8s.io/kubernetes/test/images/sample-device-plugin",
    "test-driver": "k8s.io/kubernetes/test/e2e/dra/test-driver",
}


def source_dir() -> Path:
    return repo_root() / "tools" / "peers"


def build_key(src: Path) -> str:
    h = hashlib.sha256()
    inputs = sorted(p for p in src.iterdir() if p.is_file() and p.suffix in {".mod", ".sum"})
    for p in [*inputs, Path(__file__).resolve()]:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def peers_dir(src: Path | None = None) -> Path:
    """Where the binaries for these sources live (built or not)."""
    return cache_root() / f"peers-{RELEASE}-{build_key(src or source_dir())}"


def _complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in PEERS)


def ensure_built() -> Path:
    """The directory holding both peers, built first if needed (one builder at a time)."""
    src = source_dir()
    if not (src / "go.mod").is_file():
        raise BuildError(f"the peers' module is not at {src / 'go.mod'}")
    target = peers_dir(src)
    if _complete(target):
        return target
    if shutil.which("go") is None:
        raise BuildError("the go tool is not on PATH; Go >= 1.26 builds the Go peers")
    with _lock(target.parent / f".{target.name}.lock"):
        if _complete(target):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        start = time.monotonic()
        try:
            proc = subprocess.run(
                ["go", "build", "-ldflags", "-s -w", "-o", f"{tmp}/", *PEERS.values()],
                cwd=src,
                env=go_env(),
                capture_output=True,
                text=True,
                check=False,
            )
            (tmp / "build.log").write_text(proc.stdout + proc.stderr)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
                raise BuildError(f"go build of the Go peers failed:\n{tail}")
            missing = [name for name in PEERS if not (tmp / name).is_file()]
            if missing:
                raise BuildError(f"go build finished without {', '.join(missing)}")
            (tmp / "build-seconds").write_text(f"{time.monotonic() - start:.1f}\n")
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target
