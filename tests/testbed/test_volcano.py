"""The Volcano build (kubeacc.testbed.volcano) without building: where the tarball is looked
for, which cache directory a tarball maps to, and that a missing tarball is a clear error."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from kubeacc.testbed import volcano
from kubeacc.testbed.build import BuildError


def test_the_pinned_tarball_is_beside_the_repository() -> None:
    path = volcano.tarball()
    assert path.name == f"volcano-{volcano.COMMIT[:8]}.tar.gz"
    assert path.is_file(), f"{path}: the peers' sources (../shared/peers) are missing"
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
    assert "volcano/go.mod" in names
    assert "volcano/cmd/scheduler" in names or any(
        n.startswith("volcano/cmd/scheduler/") for n in names
    )
    assert any(n.startswith("volcano/config/crd/volcano/bases/") for n in names)


def test_a_clone_made_elsewhere_finds_the_tarball_beside_its_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI clones the repository into a folder of its own (``git clone . /tmp/ci-check``): the
    peers beside the repository it was cloned from are found."""
    monkeypatch.delenv("KUBEACC_VOLCANO_TARBALL", raising=False)
    origin, clone = tmp_path / "work" / "main", tmp_path / "elsewhere" / "clone"
    peer = tmp_path / "work" / "shared" / "peers" / f"volcano-{volcano.COMMIT[:8]}.tar.gz"
    peer.parent.mkdir(parents=True)
    peer.write_bytes(b"tarball")
    origin.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    monkeypatch.setattr(volcano, "repo_root", lambda: clone)
    assert not volcano.tarball().is_file()  # no origin: nothing above the clone has it
    git = ["git", "-C", str(clone), "remote", "add", "origin", str(origin)]
    subprocess.run(git, check=True)
    assert volcano.tarball() == peer


def test_the_cache_directory_follows_the_tarballs_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path / "cache"))
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert volcano.volcano_dir(a) == volcano.volcano_dir(a)
    assert volcano.volcano_dir(a) != volcano.volcano_dir(b)
    assert volcano.volcano_dir(a).parent == tmp_path / "cache"


def test_a_complete_cache_is_used_without_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-go"))
    src = tmp_path / "v.tar.gz"
    src.write_bytes(b"source")
    target = volcano.volcano_dir(src)
    (target / volcano.CRD_DIR).mkdir(parents=True)
    (target / volcano.CRD_DIR / "jobs.yaml").write_text("{}")
    for name in (volcano.SCHEDULER_BIN, volcano.CONTROLLER_BIN):
        (target / name).write_text("")
    assert volcano.ensure_built(src) == target


def test_a_missing_tarball_says_where_to_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEACC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(volcano.TARBALL_ENV, str(tmp_path / "absent.tar.gz"))
    with pytest.raises(BuildError, match=volcano.TARBALL_ENV):
        volcano.ensure_built()
