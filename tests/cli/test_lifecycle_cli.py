"""``kubeacc lifecycle-agent --inventory cyborg``: its flags go together, and a bad credentials
file stops it with one line before it reaches the cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _lifecycle(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "kubeacc"),
            "lifecycle-agent",
            "--node-name=n",
            f"--host-root={tmp_path}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    return line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--inventory=cyborg"], "--inventory cyborg needs --cyborg-credentials"),
        (["--cyborg-credentials=/c.yaml"], "need --inventory cyborg"),
        (["--cyborg-compute-host=h1"], "need --inventory cyborg"),
    ],
)
def test_cyborg_flags_go_together(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in _error(_lifecycle(tmp_path, *args))


def test_a_bad_cyborg_credentials_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("placementUrl: http://127.0.0.1:9\n")
    done = _lifecycle(tmp_path, "--inventory=cyborg", f"--cyborg-credentials={tmp_path / 'c.yaml'}")
    assert done.returncode == 1
    line = _error(done)
    assert "Cyborg credentials" in line and "cyborgUrl" in line
