"""The Go allocator harness, built once per session from tools/allocator (cached): the default
release's (the main lane, or ``$KUBEACC_ALLOCATOR_VERSION``), v1.36.3's for the
compatibility corpus, and v1.37.2's run with DRADeviceCompatibilityGroups on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.differential.build import ensure_celgo, harness
from kubeacc.differential.harness import GoAllocator
from kubeacc.engine import celgo


@pytest.fixture(scope="session")
def go_allocator() -> Iterator[GoAllocator]:
    with GoAllocator() as go:
        yield go


@pytest.fixture(scope="session")
def go_allocator_136() -> Iterator[GoAllocator]:
    with GoAllocator(which=harness("1.36")) as go:
        yield go


@pytest.fixture(scope="session")
def go_allocator_groups() -> Iterator[GoAllocator]:
    with GoAllocator(which=harness("1.37", "DRADeviceCompatibilityGroups=true")) as go:
        yield go


@pytest.fixture(scope="session")
def celgo_library() -> Iterator[Path]:
    """kube-scheduler's CEL library (tools/celgo) built for these sources, and the engine
    pointed at it (``$KUBEACC_CELGO_LIBRARY``) rather than at whatever build the cache's
    default path names."""
    path = ensure_celgo()
    before = os.environ.get(celgo.LIBRARY_ENV)
    os.environ[celgo.LIBRARY_ENV] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop(celgo.LIBRARY_ENV, None)
        else:
            os.environ[celgo.LIBRARY_ENV] = before
