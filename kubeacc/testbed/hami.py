"""Build (or reuse) HAMi's scheduler extender, the peer of the extender benchmark.

HAMi (github.com/Project-HAMi/HAMi) shares GPUs by memory and cores through a scheduler
extender of its own: ``scheduler --http_bind ADDR --device-config-file F`` watches nodes and
pods with client-go (``KUBECONFIG``), takes a node's GPUs from its device plugin's annotation
``hami.io/node-nvidia-register`` (a JSON list of devices) when the node's handshake annotation
``hami.io/node-handshake`` is fresh or its allocatable ``nvidia.com/gpu`` is not zero, and
answers ``POST /filter`` with the one node it chose, after writing that choice on the pod
(a patch of the pod and an event, both through the API server); it has no prioritize verb.

The Go module proxy does not serve the HAMi module (403 for every version), so it is built
from a git directory (a clone, or a bare mirror) that holds :data:`COMMIT`, named by
``KUBEACC_HAMI_SOURCE``: its tree at that commit is exported and ``go build ./cmd/scheduler``
fetches every dependency from the module proxy under HAMi's own ``go.sum``. The binary lands in
``$KUBEACC_CACHE/hami-<commit>/scheduler`` and is reused from there.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from kubeacc.testbed.build import BuildError, cache_root, cached_go_build

#: The HAMi commit the benchmark's figures come from.
COMMIT = "4707fb02c91c545bc7343ce26dba4c32919f9a3e"
#: The environment variable naming the git directory to build from.
SOURCE_ENV = "KUBEACC_HAMI_SOURCE"


def hami_dir() -> Path:
    return cache_root() / f"hami-{COMMIT[:12]}"


def binary() -> Path:
    return hami_dir() / "scheduler"


def ensure_built(source: Path | None = None) -> Path:
    """HAMi's scheduler extender at :data:`COMMIT`, built first if needed."""
    target = binary()
    if target.is_file():
        return target
    src = source or (Path(os.environ[SOURCE_ENV]) if os.environ.get(SOURCE_ENV) else None)
    if src is None:
        raise BuildError(
            f"HAMi's scheduler is not built ({target} is missing) and {SOURCE_ENV} names no "
            f"git directory to build it from (a clone of github.com/Project-HAMi/HAMi holding "
            f"{COMMIT[:12]}; the Go module proxy does not serve it)"
        )
    with tempfile.TemporaryDirectory(prefix="kubeacc-hami-") as tree:
        archive = subprocess.run(
            ["git", "-C", str(src), "archive", "--format=tar", COMMIT],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise BuildError(
                f"{src} does not hold HAMi's commit {COMMIT[:12]}: "
                f"{archive.stderr.decode(errors='replace').strip()}"
            )
        subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
        cached_go_build(
            hami_dir(),
            what="HAMi's scheduler",
            cwd=Path(tree),
            # cgo on, as HAMi's own image builds it (its NVML bindings)
            command=lambda tmp: [
                "env",
                "CGO_ENABLED=1",
                "go",
                "build",
                "-ldflags",
                "-s -w",
                "-o",
                f"{tmp}/",
                "./cmd/scheduler",
            ],
            outputs=["scheduler"],
        )
    return target
