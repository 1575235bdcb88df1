"""HAMi's extender build (kubeacc/testbed/hami.py): its binary is pinned and cached, and a
build it cannot do says why before doing anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubeacc.testbed import hami
from kubeacc.testbed.build import BuildError


def test_the_binary_is_cached_under_the_pinned_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path))
    assert len(hami.COMMIT) == 40
    assert hami.binary() == tmp_path / f"hami-{hami.COMMIT[:12]}" / "scheduler"
    hami.binary().parent.mkdir(parents=True)
    hami.binary().write_bytes(b"built before")
    assert hami.ensure_built(tmp_path / "no-source") == hami.binary()  # reused, not rebuilt


def test_without_a_source_it_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path))
    monkeypatch.delenv(hami.SOURCE_ENV, raising=False)
    with pytest.raises(BuildError, match=hami.SOURCE_ENV):
        hami.ensure_built()
    assert list(tmp_path.iterdir()) == []


def test_a_source_without_the_commit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path / "cache"))
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with pytest.raises(BuildError, match=f"does not hold HAMi's commit {hami.COMMIT[:12]}"):
        hami.ensure_built(repo)
    assert not hami.binary().exists()
