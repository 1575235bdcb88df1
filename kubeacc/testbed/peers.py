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
covers the module files and the build command, so unchanged sources are never rebuilt.
"""

from __future__ import annotations

from pathlib import Path

from kubeacc.testbed.build import BuildError, cache_root, cached_go_build, repo_root, source_key

#: The release the peers come from (``tools/peers/go.mod`` requires it).
RELEASE = "v1.37.2"
#: Binary name -> its package in ``k8s.io/kubernetes``.
PEERS = {
    "sample-device-plugin": "k8s.io/kubernetes/test/images/sample-device-plugin",
    "test-driver": "k8s.io/kubernetes/test/e2e/dra/test-driver",
}


def source_dir() -> Path:
    return repo_root() / "tools" / "peers"


def _command(out: Path) -> list[str]:
    return ["go", "build", "-ldflags", "-s -w", "-o", f"{out}/", *PEERS.values()]


def build_key(src: Path) -> str:
    inputs = [p for p in src.iterdir() if p.is_file() and p.suffix in {".mod", ".sum"}]
    return source_key(inputs, [*_command(Path("OUT")), *PEERS])


def peers_dir(src: Path | None = None) -> Path:
    """Where the binaries for these sources live (built or not)."""
    return cache_root() / f"peers-{RELEASE}-{build_key(src or source_dir())}"


def ensure_built() -> Path:
    """The directory holding both peers, built first if needed (one builder at a time)."""
    src = source_dir()
    if not (src / "go.mod").is_file():
        raise BuildError(f"the peers' module is not at {src / 'go.mod'}")
    return cached_go_build(
        peers_dir(src), what="the Go peers", cwd=src, command=_command, outputs=list(PEERS)
    )
