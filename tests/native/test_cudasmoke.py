"""The conformance kit's CUDA smoke program (kubeacc/native/cudasmoke.c) against the stand-in
driver: it reports the memory the driver (or a memory share's library) gives and allocates the
MiB it is asked for, so on a node it shows a share's limit hold inside a container."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubeacc.native import build
from tests.native.conftest import Native


@pytest.fixture(scope="module")
def smoke(native: Native) -> Path:
    return build.build_smoke(native.dir)


def run(native: Native, smoke: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    preload = "KUBEACC_DEVICE_MEMORY_LIMIT" in env
    return native.run_program(smoke, *args, preload=preload, **env)


def test_without_a_share_it_sees_the_whole_device_and_allocates_what_it_is_asked(
    native: Native, smoke: Path
) -> None:
    done = run(native, smoke, "2048")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert "memory total 16384 MiB, free 16384 MiB" in lines
    assert lines[-4:] == ["allocating 2048 MiB", "cuMemAlloc 0", "cuMemFree 0", "smoke ok"]


def test_a_share_is_its_total_and_an_allocation_beyond_it_fails(
    native: Native, smoke: Path
) -> None:
    inside = run(native, smoke, "512", KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert inside.returncode == 0, inside.stdout + inside.stderr
    assert "memory total 1024 MiB, free 1024 MiB" in inside.stdout.splitlines()
    beyond = run(native, smoke, "2048", KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert beyond.returncode == 1
    assert beyond.stdout.splitlines()[-1] == "cuMemAlloc 2"  # CUDA_ERROR_OUT_OF_MEMORY
    assert "share is 1024 MiB" in beyond.stderr


@pytest.mark.parametrize("arg", ["0", "-5", "12x", "99999999999", ""])
def test_a_bad_size_is_refused_before_the_driver_is_touched(
    native: Native, smoke: Path, arg: str
) -> None:
    done = run(native, smoke, arg)
    assert done.returncode == 3
    assert done.stdout.startswith("not a size in MiB")
    assert "cuInit" not in done.stdout


@pytest.mark.parametrize(
    ("way", "refused"),
    [("vmm", "cuMemAlloc beside the mapping"), ("fork", "cuMemAlloc after the child exited")],
)
def test_the_ways_around_a_share_are_refused(
    native: Native, smoke: Path, way: str, refused: str
) -> None:
    """The self-test's VMM and fork cases (issue 44): with a 1024 MiB share the second 768 MiB
    are refused; without one they are allocated."""
    inside = run(native, smoke, "768", way, KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert inside.returncode == 0, inside.stdout + inside.stderr
    lines = inside.stdout.splitlines()
    assert lines[-2:] == [f"{refused} 2", f"smoke {way} done"], inside.stdout
    whole = run(native, smoke, "768", way)
    assert whole.stdout.splitlines()[-2:] == [f"{refused} 0", f"smoke {way} done"], whole.stdout
