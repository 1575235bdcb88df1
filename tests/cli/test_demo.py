"""``kubeacc demo`` as a user runs it: its own cluster, agents, claims, pods, the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubeacc.cli.demo_claims import CLAIMS

pytestmark = pytest.mark.cluster


def test_demo_allocates_every_sample_claim(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "kubeacc"
    out = subprocess.run(
        [str(exe), "demo", "--workdir", str(tmp_path), "--timeout", "90"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    text = out.stdout
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "demo finished" in text
    assert "not allocated" not in text
    for name in CLAIMS:
        assert name in text
    # the pods on the kubelet's node run with our CDI devices; the API-only nodes say so
    assert text.count("Running") >= 2
    assert "CDI: " in text
    assert "ACCELERATOR_UNITS=0000:" in text
    assert "(no kubelet)" in text
    assert "kunlun-node" in text
