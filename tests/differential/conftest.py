"""The Go allocator harness, built once per session from tools/allocator (cached)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubeacc.differential.harness import GoAllocator


@pytest.fixture(scope="session")
def go_allocator() -> Iterator[GoAllocator]:
    with GoAllocator() as go:
        yield go
