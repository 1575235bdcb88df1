"""The Go allocator harness, built once per session from tools/allocator (cached): the default
release's (the main lane, or ``$KUBEACC_ALLOCATOR_VERSION``), v1.36.3's for the
compatibility corpus, and v1.37.2's run with DRADeviceCompatibilityGroups on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeacc.differential.build import harness
from kubeacc.differential.harness import GoAllocator


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
