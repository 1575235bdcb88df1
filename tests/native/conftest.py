"""Builds the share-limit library, the stand-in CUDA driver and the probe program once per run."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubeacc.native import build
from kubeacc.node.shareaccount import AccountService

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Native:
    dir: Path
    library: Path
    probe: Path
    #: The probe that opens the driver itself (dlopen + dlsym), as the CUDA runtime does.
    dlprobe: Path

    def run(
        self, *args: object, preload: bool = True, timeout: float = 30, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return self.run_program(self.probe, *args, preload=preload, timeout=timeout, **env)

    def run_program(
        self, program: Path, *args: object, preload: bool = True, timeout: float = 30, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(program), *map(str, args)],
            env=self.env(preload, **env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def env(self, preload: bool = True, **env: str) -> dict[str, str]:
        out = {"PATH": os.environ.get("PATH", ""), "LD_LIBRARY_PATH": str(self.dir), **env}
        if preload:
            out["LD_PRELOAD"] = str(self.library)
        return out


@pytest.fixture(scope="session")
def native(tmp_path_factory: pytest.TempPathFactory) -> Native:
    out = tmp_path_factory.mktemp("native")
    # KUBEACC_TEST_SHARELIMIT: run the tests against another build of the library (a previous
    # revision's, to show what a test catches); the stand-in driver and probes are this tree's.
    other = os.environ.get("KUBEACC_TEST_SHARELIMIT")
    library = Path(other) if other else build.build_library(out)
    build.build_stub(out)
    probe = build.build_program(HERE / "shareprobe.c", out / "shareprobe", out)
    dlprobe = build.build_program(HERE / "dlprobe.c", out / "dlprobe", None)
    return Native(out, library, probe, dlprobe)


@pytest.fixture
def accounts() -> Iterator[AccountService]:
    """The agent's accounting service on a root of its own (short: socket paths are limited)."""
    root = Path(tempfile.mkdtemp(prefix="ka-", dir="/tmp"))
    service = AccountService(root / "shares")
    service.start()
    try:
        yield service
    finally:
        service.stop()
        shutil.rmtree(root, ignore_errors=True)
