from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.synthetic import profiles


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every profile built once per session (tests must not modify these trees)."""
    base = tmp_path_factory.mktemp("hosts")
    return {name: profiles.build(name, base / name) for name in profiles.NAMES}
