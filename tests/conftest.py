"""Shared pytest configuration: the real-cluster testbed fixtures (see docs/testing.md) and the
synthetic hosts every test directory uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts import HostFactory

pytest_plugins = ["kubeacc.testbed.pytest_plugin"]


@pytest.fixture(scope="session")
def _host_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hosts")


@pytest.fixture
def hosts(_host_cache: Path, tmp_path: Path) -> HostFactory:
    """Synthetic host trees: ``pristine(profile)`` is shared, ``copy(profile)`` may be damaged."""
    return HostFactory(_host_cache, tmp_path)
