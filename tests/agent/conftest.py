from __future__ import annotations

import pytest

from tests.crdfixtures import kubeacc_cleanup, kubeacc_crds  # noqa: F401 - fixtures
from tests.hosts import HostFactory


@pytest.fixture(scope="session")
def _host_cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return tmp_path_factory.mktemp("hosts")


@pytest.fixture
def hosts(_host_cache, tmp_path) -> HostFactory:  # type: ignore[no-untyped-def]
    return HostFactory(_host_cache, tmp_path)
