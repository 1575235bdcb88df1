"""scripts/build-image.sh's platform handling, checked with ``--dry-run`` (the build itself is
a release step, run by hand: docs/install.md "The image")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "build-image.sh"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_both_platforms_by_default_with_their_tools() -> None:
    got = run("--dry-run")
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    amd64 = next(line for line in lines if line.startswith("platform linux/amd64:"))
    arm64 = next(line for line in lines if line.startswith("platform linux/arm64:"))
    assert "--architectures=amd64" in amd64 and "manylinux2014_x86_64" in amd64
    assert "--architectures=arm64" in arm64 and "manylinux2014_aarch64" in arm64
    assert "cc aarch64-linux-gnu-gcc" in arm64 and "qemu-aarch64" in arm64
    assert "tag <version>-arm64" in arm64
    assert lines[-1] == "index: <version> -> amd64 arm64"


def test_one_platform_and_its_spellings() -> None:
    for spelling in ("linux/arm64", "linux/arm64/v8"):
        got = run("--platform", spelling, "--dry-run", "out")
        assert got.returncode == 0, got.stderr
        assert got.stdout.splitlines()[-1] == "index: <version> -> arm64"
    got = run("--platform=linux/amd64", "--dry-run")
    assert "platform linux/arm64" not in got.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--platform", "linux/s390x"), "platform linux/s390x not supported"),
        (("--platform", "linux/arm64,linux/arm64"), "platform linux/arm64 given twice"),
        (("--platform",), "--platform needs a value"),
        (("--bogus",), "unknown option --bogus"),
        (("a", "b"), "one OUT_DIR only"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_built(
    args: tuple[str, ...], message: str
) -> None:
    got = run("--dry-run", *args)
    assert got.returncode == 2
    assert message in got.stderr
    assert not got.stdout
